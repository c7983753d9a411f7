from lousho.cli import main

main()
