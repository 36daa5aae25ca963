"""The agent: the loop (`loop.py`) and its steps, in rooms: opening/, context/, turns/, cost/."""
