"""What a turn costs: the ledger of upstream calls, spend caps and the budget check."""
