"""Pieces of the one `Settings` in `app/config.py`, kept apart so that module stays under the
size limit: groups of settings it composes (`work.py`) and how single settings are read
(pure functions of a value, importing nothing of Courier's, so app/config.py may use them)."""
