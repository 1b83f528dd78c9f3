"""``python -m service`` is the ``jobq`` command."""

from service.cli import main

if __name__ == "__main__":
    main()
