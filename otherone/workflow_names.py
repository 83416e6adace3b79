"""How clients address a run: the workflow type, its signals, queries and updates, memo keys.

Re-exported by `otherone.contracts` (with the types they carry); apart from it so that a client
that only reads records (`otherone show`) does not build the contract models (issue 16).
"""

WORKFLOW_NAME = "AgentRunWorkflow"
SIGNAL_USER_MESSAGES = "user_messages"
QUERY_RECORD = "record"
UPDATE_CALL_AGENT = "call_agent"
#: Update: a person's decision on an approval request or answer to a question (`ApprovalDecision`
#: in, the decided `ApprovalRequest` out).
UPDATE_DECIDE_APPROVAL = "decide_approval"
#: Query: every approval request of the run's current history, open and decided.
QUERY_APPROVALS = "approvals"
#: Query: the run's `RunRef` (a worker resolves a compact ``ref`` key it has not seen with it).
QUERY_RUN_REF = "run_ref"
#: Signal: a spawned child tells its caller it has ended (`SpawnEnded`); addressed by the
#: caller's workflow id, so it reaches the caller's current history after continue-as-new too.
SIGNAL_SPAWNED_RUN_ENDED = "spawned_run_ended"
#: Signal: a fleet permit this run waits for may be free now (`otherone.store.capacity`); the
#: run asks again at once instead of at the end of its wait.
SIGNAL_CAPACITY_FREED = "capacity_freed"

#: Workflow memo keys.
MEMO_FINGERPRINT = "request_fingerprint"
MEMO_IDEMPOTENCY_KEY = "idempotency_key"
