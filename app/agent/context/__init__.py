"""One upstream request's contents: prompt, context files, window, compaction, projection, cache."""
