"""Execution: lazy DeviceOps and the ways to drive them."""
