"""The host runtime: devices, host tensors and partitions, ownership, and launch preparation."""
