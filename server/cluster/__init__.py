"""Many machines behind one front: a gateway places sessions on avatar nodes of a Ray cluster.

A node is one machine running a whole ``avatar serve`` app (engine workers and WebRTC endpoint)
inside a Ray actor, so generated frames never cross the network; the gateway carries only
signalling (session creation, offer/answer, WHIP/WHEP) and the control websocket.
"""
