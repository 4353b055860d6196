"""`python -m llmcli` entry point."""

from llmcli.cli.app import main

if __name__ == "__main__":
    main()
