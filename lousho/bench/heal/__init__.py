"""The heal benchmark: the eleven scenarios of the source report and their bars."""
