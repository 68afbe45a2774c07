"""Notifications, pure: the alert policy (:mod:`.policy`), the incident messages for Slack and email
(:mod:`.alerts`) and Amazon Q Developer in chat applications (:mod:`.chatbot`), the finding events
(:mod:`.finding_event`), and Slack delivery (:mod:`.slack`).

Renderers never see a webhook URL or any other secret; delivery (:mod:`hyperpod_debugger.notify.slack`)
never logs one.
"""
