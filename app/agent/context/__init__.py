"""What one upstream request carries: the window, compaction, cache marks and the projection."""
