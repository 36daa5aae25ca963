"""Operations: the `courier` commands (doctor, records, minted tokens), the graceful drain,
ports that really are free, and `make demo`."""
