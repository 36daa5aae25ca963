"""The terminal tool's bubblewrap sandbox and the cgroups that bound it."""
