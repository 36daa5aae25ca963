"""How single settings are read, kept out of app/config.py (at its size budget): pure
functions of a value, importing nothing of Courier's, so app/config.py may use them."""
