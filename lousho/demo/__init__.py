"""demo: ``make demo``, the main job end to end on a fresh store."""
