package apitype

// The pictures of issue 42 ("at a glance"): a workflow drawn, its activity
// over time. The page draws them and the CLI prints them (keep graph,
// keep activity) from these answers.

// Graph is a workflow drawn: its producers, webhooks, topics open to the
// event API and tasks, its topics, its consumers and the connector
// methods its handlers call, each with its live counts; read from the
// active version's declaration and its script's analysis, and the store.
type Graph struct {
	Workflow string `json:"workflow"`
	Version  string `json:"version"`
	// Day is the UTC day the doneToday counts count (2026-11-28).
	Day   string      `json:"day"`
	Nodes []GraphNode `json:"nodes"`
	Edges []GraphEdge `json:"edges"`
}

// GraphNode is one box of the picture.
type GraphNode struct {
	// ID is kind:name ("topic:order", "connector:http.request",
	// "api:order" for the event API's posts to topic order).
	ID   string `json:"id"`
	Kind string `json:"kind"` // producer, webhook, api, task, topic, consumer, connector
	Name string `json:"name"`
	// Column is where it is drawn, by its role: 0 what brings work in, 1
	// topics, 2 consumers and tasks, 3 connectors.
	Column int `json:"column"`
	// Pending and Reserved are events waiting (a topic's, or the topics a
	// consumer reads); for a connector, its writes not settled yet.
	Pending  int `json:"pending"`
	Reserved int `json:"reserved"`
	// Blocked counts the blocked runs at this node (a handler's; for a
	// connector, the blocked runs whose write is its); BlockedRun is one.
	Blocked    int    `json:"blocked"`
	BlockedRun string `json:"blockedRun,omitempty"`
	// DoneToday counts what was done today: a handler's committed runs, a
	// topic's consumer's, a connector's applied writes.
	DoneToday int `json:"doneToday"`
	// Targets are where a connector's calls go, as the script writes them
	// (a URL's constant start); empty when computed.
	Targets []string `json:"targets,omitempty"`
	// Intake is what came in today at a webhook (its deliveries) or the
	// event API (its posts to one topic); nil on the other nodes.
	Intake *GraphIntake `json:"intake,omitempty"`
}

// GraphIntake counts what a webhook or the event API took in today (UTC).
type GraphIntake struct {
	// Received counts today's deliveries of a webhook (every status), or
	// the events posted to a topic that keep took (a post of an id posted
	// before writes nothing and is not counted).
	Received int `json:"received"`
	// Accepted, Duplicate, Refused (failed verification) and Failed (its
	// handler failed) split a webhook's; zero for the event API.
	Accepted  int `json:"accepted"`
	Duplicate int `json:"duplicate"`
	Refused   int `json:"refused"`
	Failed    int `json:"failed"`
	// Held counts a webhook's deliveries held now, whenever received.
	Held int `json:"held"`
	// LastReceived is when a webhook last received a delivery, any day
	// (RFC 3339; empty: never).
	LastReceived string `json:"lastReceived,omitempty"`
}

// GraphEdge is an arrow: work or calls going from one node to another.
type GraphEdge struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Kind is "write" for a handler's mutate calling a connector method
	// (the write it makes), "read" for the calls of its other phases;
	// empty for work (events published, topics read).
	Kind string `json:"kind,omitempty"`
}

// Activity is what a workflow did per hour over a time range.
type Activity struct {
	Workflow string `json:"workflow"`
	// From and To bound the range (RFC 3339, UTC; To excluded).
	From  string         `json:"from"`
	To    string         `json:"to"`
	Hours []ActivityHour `json:"hours"`
}

// ActivityHour is one hour of Activity.
type ActivityHour struct {
	Start string `json:"start"` // RFC 3339, UTC
	// Inputs registered, writes applied, runs failed, and the minutes
	// runs waited for a person, in the hour.
	Inputs         int `json:"inputs"`
	Writes         int `json:"writes"`
	Failures       int `json:"failures"`
	BlockedMinutes int `json:"blockedMinutes"`
}
