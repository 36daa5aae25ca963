"""Groups of settings that `app/config.py` composes into its one `Settings` (kept apart so
that module stays under the size limit).
"""
