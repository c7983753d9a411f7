"""``python -m lousho.models serve-scripted --script FILE``: the models CLI without the top-level group."""

from lousho.models.cli import main

main()
