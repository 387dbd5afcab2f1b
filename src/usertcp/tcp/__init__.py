"""The sans-IO TCP core: connections, listeners and the stack that demultiplexes them."""
