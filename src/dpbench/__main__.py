from dpbench.cli import main

main()
