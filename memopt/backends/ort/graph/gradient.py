"""A forward-only ONNX model turned into ORTModule's training graph by ORT's own builders.

The pipeline is ORTModule's: ORT's symbolic shape inference, ``OrtModuleGraphBuilder``
(the gradient builder ORTModule uses, which inserts the YieldOp between forward and
backward), then a ``TrainingAgent`` session whose optimized graph is saved, exactly as
ORTModule saves ``*_execution_model_training.onnx``, with ORT's own analysis of it beside
(``<graph>.ort.json``, see ``memopt.backends.ort.graph.ort_reference``). It runs in a child process
(``python -m memopt.backends.ort.graph.gradient``) so a crash inside ORT cannot take memopt down.

Two adjustments make a plain ``torch.onnx.export`` file look like ORTModule's own export:
trainable float initializers become graph inputs (ORTModule feeds parameters as inputs),
and Dropout/LayerNormalization get the mask and mean/inv-std outputs their gradients read.

Loss: ``outside`` (default) is ORTModule's situation, the loss computed in PyTorch from the
model's outputs, whose gradients enter at the YieldOp; ``cross-entropy`` and ``mse`` put
the loss inside the graph, against a ``labels``/``target`` input.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from memopt.backends.ort.graph.ort_reference import session_reference
from memopt.errors import MemoptError

__all__ = ["LOSSES", "GradientError", "build_training_graph"]

LOSSES = ("outside", "cross-entropy", "mse")
_TIMEOUT_S = 1800
_ORT_MAX_IR_VERSION = 10


class GradientError(MemoptError):
    """ORT could not build a training graph from the model."""


def build_training_graph(forward: Path, output: Path, loss: str = "outside", python: str | None = None) -> Path:
    """Write the training graph of ``forward`` to ``output`` (ORT's execution graph)."""
    if loss not in LOSSES:
        raise GradientError(f"--loss must be one of {', '.join(LOSSES)}, not {loss!r}")
    command = [python or sys.executable, "-m", "memopt.backends.ort.graph.gradient", str(forward), str(output), loss]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as err:
        raise GradientError(f"building the training graph of {forward} took over {_TIMEOUT_S} s") from err
    if done.returncode != 0 or not output.is_file():
        lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith(" ")]
        reason = lines[-1].rsplit("] : ", 1)[-1] if lines else "no output"
        raise GradientError(f"ORT could not build a training graph from {forward}: {reason}")
    return output


def _main(forward_path: str, output_path: str, loss: str) -> None:
    from onnxruntime.capi import _pybind_state as C
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    model = onnx.load(forward_path)
    # Newer onnx packages stamp IR versions ORT 1.19 refuses to load; nothing in a model
    # ORTModule can train depends on the newer IR.
    model.ir_version = min(model.ir_version, _ORT_MAX_IR_VERSION)
    trainable = _parameters_as_inputs(model)
    _add_gradient_outputs(model)
    if loss != "outside":
        _append_loss(model, loss)
    model = SymbolicShapeInference.infer_shapes(model, auto_merge=True, guess_output_rank=True)

    config = C.OrtModuleGraphBuilderConfiguration()
    config.initializer_names = trainable
    config.initializer_names_to_train = trainable
    config.input_names_require_grad = []
    config.build_gradient_graph = True
    config.enable_caching = False
    config.use_memory_efficient_gradient = False
    config.loglevel = C.Severity.WARNING
    builder = C.OrtModuleGraphBuilder()
    builder.initialize(model.SerializeToString(), config)
    transformers = C.TrainingGraphTransformerConfiguration()
    transformers.propagate_cast_ops_config = C.PropagateCastOpsConfiguration()
    builder.build(transformers)
    training = onnx.load_model_from_string(builder.get_gradient_model())

    info = builder.get_graph_info()
    forward_outputs = len(info.user_output_names) + len(info.frontier_node_arg_map)
    reference = session_reference(training, forward_outputs, output_path)
    Path(output_path).with_suffix(".ort.json").write_text(json.dumps(reference))


def _parameters_as_inputs(model: onnx.ModelProto) -> list[str]:
    """Move trainable (float, non-scalar) initializers to graph inputs, as ORTModule exports them."""
    graph = model.graph
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)
    trainable, constants = [], []
    for initializer in graph.initializer:
        if initializer.data_type in floats and len(initializer.dims) >= 1 and not initializer.name.startswith("/"):
            graph.input.append(
                helper.make_tensor_value_info(initializer.name, initializer.data_type, list(initializer.dims))
            )
            trainable.append(initializer.name)
        else:
            constants.append(initializer)
    del graph.initializer[:]
    graph.initializer.extend(constants)
    return trainable


def _add_gradient_outputs(model: onnx.ModelProto) -> None:
    for node in model.graph.node:
        wanted = {"Dropout": 2, "LayerNormalization": 3}.get(node.op_type, 0)
        while len(node.output) < wanted:
            node.output.append(f"{node.output[0]}_memopt_output{len(node.output)}")


def _append_loss(model: onnx.ModelProto, loss: str) -> None:
    graph = model.graph
    result = graph.output[0]
    dims = [d.dim_value or d.dim_param for d in result.type.tensor_type.shape.dim]
    if loss == "cross-entropy":
        classes = dims[-1] if dims else None
        if not isinstance(classes, int) or classes <= 0:
            raise SystemExit("cross-entropy needs the first output's last dim (classes) to be static")
        graph.input.append(helper.make_tensor_value_info("labels", TensorProto.INT64, dims[:-1]))
        graph.initializer.extend(
            [
                helper.make_tensor("memopt_logits_shape", TensorProto.INT64, [2], [-1, classes]),
                helper.make_tensor("memopt_labels_shape", TensorProto.INT64, [1], [-1]),
            ]
        )
        graph.node.extend(
            [
                helper.make_node("Reshape", [result.name, "memopt_logits_shape"], ["memopt_logits_2d"]),
                helper.make_node("Reshape", ["labels", "memopt_labels_shape"], ["memopt_labels_1d"]),
                helper.make_node("SoftmaxCrossEntropyLoss", ["memopt_logits_2d", "memopt_labels_1d"], ["loss"]),
            ]
        )
    else:
        graph.input.append(helper.make_tensor_value_info("target", result.type.tensor_type.elem_type, dims))
        graph.node.extend(
            [
                helper.make_node("Sub", [result.name, "target"], ["memopt_error"]),
                helper.make_node("Mul", ["memopt_error", "memopt_error"], ["memopt_squared"]),
                helper.make_node("ReduceMean", ["memopt_squared"], ["loss"], keepdims=0),
            ]
        )
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("loss", result.type.tensor_type.elem_type, []))


if __name__ == "__main__":
    _main(*sys.argv[1:4])
