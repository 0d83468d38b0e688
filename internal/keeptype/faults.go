package keeptype

// The kinds of fault keep knows (issue 41: keep test's fakes, the
// connectors' table of what a fault means and the fakes of internal/fake
// share these names; production code takes them from here, never from
// the fakes' package).
const (
	FaultTimeoutAfterApply = "timeout_after_apply"
	FaultDropAfterApply    = "drop_after_apply"
	FaultStatus500After    = "500_after_apply"
	FaultTimeout           = "timeout"
	FaultDrop              = "drop"
	FaultStatus429         = "429"
	FaultStatus500         = "500"
	FaultStatus503         = "503"
	FaultStatus401         = "401"
	FaultStatus403         = "403"
)

// FaultKinds says what each kind does.
var FaultKinds = map[string]string{
	FaultTimeoutAfterApply: "apply the write, then answer nothing until the client gives up",
	FaultDropAfterApply:    "apply the write, then close the connection without an answer",
	FaultStatus500After:    "apply the write, then answer 500",
	FaultTimeout:           "answer nothing until the client gives up; apply nothing",
	FaultDrop:              "close the connection without an answer; apply nothing",
	FaultStatus429:         "answer 429 with Retry-After (retryAfter seconds, default 1); apply nothing",
	FaultStatus500:         "answer 500; apply nothing",
	FaultStatus503:         "answer 503; apply nothing",
	FaultStatus401:         "answer 401 (the credential is not accepted); apply nothing",
	FaultStatus403:         "answer 403 (the credential may not do this); apply nothing",
}
