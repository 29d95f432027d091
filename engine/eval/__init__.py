"""Evaluation of avatar pipelines against the puppet renderer (issue 4, "Evaluation").

``metrics`` holds pure functions on videos, ``probe`` the mouth-openness regressor that
reads lip motion from pixels, ``material`` the held-out identities and speech, ``run``
``evaluate`` and its table, and ``cli`` the ``avatar eval`` flags (``add_eval_parser``).
Nothing is imported here, so the CLI can register ``eval`` without loading torch.
"""
