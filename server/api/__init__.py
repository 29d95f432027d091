"""The HTTP and websocket face of the server: the app, the control socket, wire types, errors, metrics."""
