"""The shared kernel: leaves every part may import; each imports nothing of ours but other leaves."""
