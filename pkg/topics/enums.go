package topics

// Role is what a node of the agent tree is (seed 000 "Node Digest Shape").
type Role string

// The roles of seed 000. RoleUnknown is canopy's honest answer for a node that
// has sent events but whose tree.node_created the projection has not seen
// (seed 003: never fill in a default that looks like a fact).
const (
	RoleConductor      Role = "conductor"
	RoleWorker         Role = "worker"
	RoleAppAgent       Role = "app_agent"
	RoleUIAgent        Role = "ui_agent"
	RoleSystemActor    Role = "system_actor"
	RoleHumanInterface Role = "human_interface"
	RoleUnknown        Role = "unknown"
)

// Roles lists the roles a producer may declare, in contract order.
var Roles = []Role{RoleConductor, RoleWorker, RoleAppAgent, RoleUIAgent, RoleSystemActor, RoleHumanInterface}

// Status is a node's lifecycle state (seed 000 "Lifecycle").
type Status string

// The statuses of seed 000. StatusUnknown means the runtime has no facts.
const (
	StatusIdle      Status = "idle"
	StatusRunning   Status = "running"
	StatusBlocked   Status = "blocked"
	StatusFailed    Status = "failed"
	StatusCompleted Status = "completed"
	StatusUnknown   Status = "unknown"
)

// Statuses lists every status in contract order; StatusCounts follows it.
var Statuses = []Status{StatusIdle, StatusRunning, StatusBlocked, StatusFailed, StatusCompleted, StatusUnknown}

// ReportableStatuses are the statuses a producer may set with tree.node_status;
// "unknown" is the projection's to say, not a producer's.
var ReportableStatuses = []Status{StatusIdle, StatusRunning, StatusBlocked, StatusFailed, StatusCompleted}

// SignalKind is the kind of a node's most recent signal (seed 000 "Recent signal").
type SignalKind string

// The signal kinds of seeds 000 and 002.
const (
	SignalProgress  SignalKind = "progress"
	SignalResult    SignalKind = "result"
	SignalFailed    SignalKind = "failed"
	SignalRequest   SignalKind = "request"
	SignalHeartbeat SignalKind = "heartbeat"
	SignalInput     SignalKind = "input"
)

// Lane is the delivery lane of a wake: human input travels on its own lane so
// that it is never queued behind agent traffic (seed 002).
type Lane string

// The two lanes.
const (
	LaneNormal   Lane = "normal"
	LanePriority Lane = "priority"
)

// TriggerKind says why a wake was raised (DESIGN.md "Wakes out").
type TriggerKind string

// The trigger kinds.
const (
	TriggerResult        TriggerKind = "result"
	TriggerFailed        TriggerKind = "failed"
	TriggerRequest       TriggerKind = "request"
	TriggerStatusBlocked TriggerKind = "status_blocked"
	TriggerStatusFailed  TriggerKind = "status_failed"
	TriggerCompleted     TriggerKind = "status_completed"
	TriggerHumanInput    TriggerKind = "human_input"
	TriggerLeaseExpired  TriggerKind = "lease_expired"
	TriggerWatchdog      TriggerKind = "watchdog"
	TriggerProgress      TriggerKind = "progress"
	TriggerGuard         TriggerKind = "guard"
)

// TriggerKinds lists every trigger kind.
var TriggerKinds = []TriggerKind{TriggerResult, TriggerFailed, TriggerRequest, TriggerStatusBlocked, TriggerStatusFailed,
	TriggerCompleted, TriggerHumanInput, TriggerLeaseExpired, TriggerWatchdog, TriggerProgress, TriggerGuard}

// WatchdogStatus classifies a dispatched subagent by the evidence the
// projection has seen (seed 004).
type WatchdogStatus string

// The watchdog statuses of seed 004.
const (
	WatchdogActive                 WatchdogStatus = "active"
	WatchdogSuspectDeliveryFailure WatchdogStatus = "suspect_delivery_failure"
	WatchdogDoneButNotForwarded    WatchdogStatus = "done_but_not_forwarded"
	WatchdogCompleted              WatchdogStatus = "completed"
	WatchdogRecovered              WatchdogStatus = "recovered"
	WatchdogBlocked                WatchdogStatus = "blocked"
)

func oneOf[T ~string](v T, allowed []T) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}
