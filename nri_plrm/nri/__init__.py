"""The NRI plugin stub: connect, register, configure, synchronize, dispatch, reconnect."""
