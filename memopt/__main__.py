from memopt.cli import main

main()
