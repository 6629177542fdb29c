"""``python -m steptrace.cli``: the same as the ``steptrace`` command."""

from steptrace.cli._main import main

if __name__ == "__main__":
    main()
