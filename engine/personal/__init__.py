"""Personal avatars: a person's own short video made their avatar (``enroll``), kept on disk
(``store``); sessions animate its rest frame and show the person's own mouth."""
