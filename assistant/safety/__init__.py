"""Input and output safety: trained classifiers, PII rules, stream guard, injection defence.

Entry points: `classifier.shared_classifier` (check_input / check_output),
`stream_guard.StreamGuard`, `injection.screen_passages` and `injection.ToolCallGate`,
`events.record_events`. Retrain with `python -m assistant.safety.train`.
"""
