"""What a worker's checkpoint holds (`state`), how several are merged for an elastic restart
(`merge`), and the restart plan that shares the old workers' leftovers (`restart`)."""
