"""The doc's sample summaries as text, and the real sample logs, shared by the parser and CLI tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

__all__ = [
    "FORMAT_A_1_15",
    "FORMAT_B_1_17",
    "PLAN_TABLE_1_17",
    "PLAIN_LOG",
    "PLAN_TABLE_1_19",
    "SAMPLE_LOGS",
    "SAMPLE_LOGS_1_19",
    "rewrap_like_1_16",
]

SAMPLE_LOGS = Path(__file__).resolve().parent.parent.parent / "sample_logs"
SAMPLE_LOGS_1_19 = SAMPLE_LOGS / "1.19.2"
PLAIN_LOG = SAMPLE_LOGS_1_19 / "gpt-tiny_b4_info_no-config.log"  # the tiny GPT at INFO, no config

FORMAT_A_1_15 = (
    "2023-06-01 10:00:00.000 [I:onnxruntime:, memory_optimizer.cc:441 PrintSummary] \n"
    "MemoryOptimizer Summary:\n"
    "\tUser config:\n"
    "\tBiasGelu+Cast+Cast+:1:2,Cast+:1:-1,Dropout+:0:-1\n"
    "\t=================================\n"
    "\t########Recompute########\n"
    "\tSubgraph: FusedMatMul+Add+Dropout+Add+\n"
    "\t\tOptimizationType: Disabled\n"
    "\t\tPatterns: \n"
    "\t\t\tPatternShape:attention_mask_dim0 x input_ids_dim1 x 64 x \tFrequency:6\n"
    "\t--------------------------------\n"
    "\tSubgraph: BiasGelu+Cast+Cast+\n"
    "\t\tOptimizationType: Recomputed (requested_count=2, actual applied_count=2)\n"
    "\t\tPatterns: \n"
    "\t\t\tPatternShape:attention_mask_dim0 x input_ids_dim1 x 256 x \tFrequency:3\n"
    "\t--------------------------------\n"
    "\t=================================\n"
    "\t########RecomputeWithCompromise########\n"
    "\tSubgraph: Cast+\n"
    "\t\tOptimizationType: Recomputed (requested_count=-1, actual applied_count=1)\n"
    "\t\tPatterns: \n"
    "\t\t\tPatternShape:attention_mask_dim0 x input_ids_dim1 x 256 x \tFrequency:3\n"
    "\t--------------------------------\n"
    "\t=================================\n"
)

FORMAT_B_1_17 = """\
2024-02-01 10:00:00.000 [I:onnxruntime:, memory_optimizer.cc:217 PrintSummary] 
MemoryInsight Summary - User config: BiasGelu+Cast+Cast+:1:2,Cast+:2:-1,Dropout+:0:-1
===================================================================================================================================================
|Freq   | Memory Optimization Opportunities (Clustered by node-level activation patterns)                                                         |
|_ _ _ _|_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _|
|3      |For each row options are mutually exclusive, only one of them can be enabled.                                                            |
|       |                                                                                                                                         |
|       |>>Option 1     : Recompute subgraph BiasGelu+Cast+Cast+                                                                                  |
|       |  Status       : Enabled, requested count=2, actual applied count=3                                                                      |
|       |  Stashed Activations:                                                                                                                   |
|       |   - Output 0  : [((attention_mask_dim0)*(attention_mask_dim1)*(256))], byte/elem: 4, 100% saved                                         |
|       |                                                                                                                                         |
|       |>>Option 2     : RecomputeWithCompromise subgraph Cast+                                                                                  |
|       |  Status       : Disabled. Enable with export ORTMODULE_MEMORY_OPT_CONFIG=Cast+:2:-1                                                     |
|       |  Stashed Activations:                                                                                                                   |
|       |   - Output 0  : [((attention_mask_dim0)*(attention_mask_dim1)*(256))], byte/elem: 4, 50% saved                                          |
|_ _ _ _|_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _|
===================================================================================================================================================
Note: use comma as a separator for enabling more than one subgraphs.

"""

PLAN_TABLE_1_17 = """\
2024-02-01 10:00:01,000 orttraining [WARNING] - 
\x1b[95m***** ONNX Runtime Training (ORTModule) is accelerating your model *****\x1b[0m
Memory Optimizer     :  OFF  :  Enable with env ORTMODULE_MEMORY_OPT_LEVEL=1 or ORTMODULE_MEMORY_OPT_CONFIG=<plan1 config>,<plan2 config>,...
                                Configs                                                         Freq  Max Saving(Bytes)  Saving Symbolic(Bytes)
 - Plan 1            :  OFF  :  BiasGelu+Cast+Cast+:1:-1                                        3     196,608            3072.0*input_ids_dim0*input_ids_dim1
 - Plan 2            :  OFF  :  FusedMatMul+:1:-1                                               3     196,608            3072.0*input_ids_dim0*input_ids_dim1
 - Plan 5            :  OFF  :  Cast+:2:-1                                                      3     98,304             1536.0*input_ids_dim0*input_ids_dim1
 - Plan 7            :  OFF  :  Dropout+:1:-1                                                   3     49,152             48.0*input_ids_dim0*input_ids_dim1**2
Note 1: [Memory Optimizer] Use ORTMODULE_MEMORY_OPT_LEVEL=1 to enable all recomputable subgraphs per transformer layer.
Note 2: [Memory Optimizer] Or use comma as a delimiter to selectively enable multiple memory optimization plans:
  export ORTMODULE_MEMORY_OPT_CONFIG=<plan1 config>,<plan2 config>,...
Note 3: memory saving is calculated based on the 1st batch symbolic dim values:
  input_ids_dim0=4,  input_ids_dim1=16,  attention_mask_dim0=4,  attention_mask_dim1=16,
"""

PLAN_TABLE_1_19 = """\
Memory Optimizer     :  OFF  :  Enable with env ORTMODULE_MEMORY_OPT_LEVEL=1/2 or ORTMODULE_MEMORY_OPT_CONFIG=<config.json>
                                Configs                                        Freq  Max Saving(Bytes)  Saving Symbolic(Bytes)
 - Plan 1            :  OFF  :  FusedMatMul+Add+:1:-1                          4     67,108,864         16384.0*ids_dim0*ids_dim1
 - Plan 2            :  OFF  :  FusedMatMul+Where+Softmax+:1:-1                4     67,108,864         64.0*ids_dim0*ids_dim1**2
 - Plan 3            :  OFF  :  Gelu+:1:-1                                     4     67,108,864         16384.0*ids_dim0*ids_dim1
 - Plan 4            :  OFF  :  FusedMatMul+Add+Split+Reshape+Transpose+:1:-1  12    50,331,648         12288.0*ids_dim0*ids_dim1
 - Plan 5            :  OFF  :  FusedMatMul+Add+Add+:1:-1                      8     33,554,432         8192.0*ids_dim0*ids_dim1
 - Plan 6            :  OFF  :  MatMul+Transpose+Reshape+:1:-1                 4     16,777,216         4096.0*ids_dim0*ids_dim1
 - Plan 7            :  OFF  :  LayerNormalization+:1:-1                       9     147,456            36.0*ids_dim0*ids_dim1
 - Plan 8            :  OFF  :  Range+:1:-1                                    1     2,048              8.0*ids_dim1
Note 3: [Memory Optimizer] Memory saving is calculated based on the 1st batch symbolic dim values:
  ids_dim0=16,  ids_dim1=256,
"""


def rewrap_like_1_16(cpp_output: str, width: int = 180) -> str:
    """Captured C++ output as the 1.16 Python logger re-emits it."""
    pieces = [piece for line in cpp_output.splitlines() for piece in textwrap.wrap(line, width)]
    return (
        "2023-09-01 10:00:00,000 orttraining [WARNING] - [session creation] Filtered logs (3 records suppressed):\n    "
        + "\n    ".join(pieces)
        + "\n"
    )
