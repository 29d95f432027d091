"""One machine's server as several processes (``avatar serve --web-processes N``): the node's
engine workers, started once and shared; N web processes, each holding its own sessions'
signalling, control sockets and media; and one HTTP front that routes to them."""
