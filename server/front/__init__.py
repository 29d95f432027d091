"""One HTTP front for several apps that each serve their own sessions: the Ray cluster's gateway
(its apps: avatar nodes) and a node's front (its apps: the node's web processes). A new session
goes to the app with the most room; everything about a session (offer, DELETE, WHIP/WHEP, the
control socket) is routed to the app that holds it; media flows between the client and that app."""
