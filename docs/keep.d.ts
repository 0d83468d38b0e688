// keep.d.ts: the types of keep's script API, written by `keep types`; do not edit it, run `keep types` again.
// Use it in a script: put the two lines
//   // @ts-check
//   /// <reference path="./keep.d.ts" />
// at its top; then an editor, or tsc --noEmit --allowJs --checkJs, says
// where a call breaks keep's rules before keep runs it.

declare namespace Keep {
  /** Declares the workflow: end the script with `export default Keep.workflow({ ... })`. */
  function workflow(def: Workflow): Workflow;
  /** Marks a producer (writing the object directly works too). */
  function producer(p: Producer): Producer;
  /** Marks a consumer (writing the object directly works too). */
  function consumer(c: Consumer): Consumer;
  /** Marks an item script (writing the object directly works too). */
  function task(t: Task): Task;

  interface Workflow {
    /** letters, digits, . _ - (at most 100) */
    name: string;
    /** every topic a handler publishes or subscribes to */
    topics?: { [topic: string]: Topic };
    producers?: { [name: string]: Producer };
    consumers?: { [name: string]: Consumer };
    tasks?: { [name: string]: Task };
    /** true, or tool / tool.method names whose every call waits for a person */
    requireApproval?: boolean | string[];
    /** requests other systems push to keep: POST /hooks/WORKFLOW/NAME (keep serve --webhooks-addr) */
    webhooks?: { [name: string]: Webhook };
  }
  interface Webhook {
    publishes: string[];
    /** how each request is checked before the handler sees it; secret names a secret set with keep secret set NAME */
    verify:
      | { hmac: { header: string; prefix?: string; secret: string } }
      | { stripe: { secret: string; tolerance?: number } }
      | { slack: { secret: string; tolerance?: number } }
      | { token: { header: string; prefix?: string; secret: string } };
    /** where a delivery's id is (a retry of an accepted one changes nothing); none: the body's hash */
    dedupe?: { header: string } | { json: string };
    /** runs for each new, verified delivery; what it registers and publishes is committed before the sender gets its 2xx */
    handler(ctx: WebhookCtx, req: WebhookRequest): unknown;
  }
  /** the request a webhook's handler receives */
  interface WebhookRequest {
    method: string;
    /** header names in lower case; a repeated header's values joined by ", " */
    headers: { [name: string]: string };
    /** the first value of each query parameter */
    query: { [name: string]: string };
    /** the body parsed as JSON, or null */
    json: any;
    /** the body as text */
    body: string;
  }
  interface Topic {
    /** "api": the topic's events are posted by apps (keep publish, the event API), not by a handler */
    from?: "api";
  }
  /** an interval (`30s`, `5m`, `1h`, `1d`) or a cron of 5 fields */
  type Schedule = { interval: string; cron?: undefined } | { cron: string; interval?: undefined };
  interface Producer {
    publishes: string[];
    schedule: Schedule;
    /** brings things from the outside in; returns the state its next run gets */
    handler(ctx: ProducerCtx, state: any): unknown;
  }
  interface Consumer {
    subscribe: string[];
    /** the topics next may publish to */
    publishes?: string[];
    /** selects the work: which events this run takes, and the data mutate and next need */
    prepare(ctx: PrepareCtx, state: any): PrepareResult | Promise<PrepareResult>;
    /** at most one write, the last thing it does; the write's result goes to next */
    mutate?(ctx: MutateCtx, prepared: PrepareResult): unknown;
    /** publishes what follows and returns the new state */
    next?(ctx: NextCtx, prepared: PrepareResult, mutationResult: MutationResult): unknown;
  }
  interface Task {
    schedule: Schedule;
    /** runs on its schedule; every write happens inside ctx.withItem */
    run(ctx: TaskCtx, state: any): unknown;
  }
  /** what prepare returns */
  interface PrepareResult<D = any> {
    /** the events this run takes; [] means nothing to do */
    reservations?: Reservation[];
    /** anything mutate and next need (JSON, at most 1 MiB) */
    data?: D;
    /** what the run is about, for people */
    ui?: { title?: string };
    /** when to run again without new events: ms since 1970 or an ISO time */
    wakeAt?: number | string;
  }
  interface Reservation {
    topic: string;
    /** messageIds of pending events of the topic */
    ids: string[];
  }
  /** what next learns of mutate's write */
  type MutationResult = { status: "applied"; result: any } | { status: "none" } | { status: "skipped" };
  /** an event, as ctx.peek and ctx.getByIds return it */
  interface Event {
    messageId: string;
    topic: string;
    payload: any;
    attempt: number;
    createdAt: number;
  }
  /** the item withItem's handler works on */
  interface Item {
    id: string;
    title: string;
    /** done in an earlier run: do not write again */
    isDone: boolean;
    attempt: number;
  }
  /** what every phase's ctx has */
  interface BaseCtx {
    /** a line in the run's trace */
    log(...values: any[]): void;
    /** milliseconds since 1970, recorded in the trace */
    now(): number;
    /** a number in [0, 1), recorded in the trace */
    random(): number;
  }
  /** a source a connector declares, and its types */
  type Source =
    | { source: "calendar"; type: "event" }
    | { source: "email"; type: "message" }
    | { source: "files"; type: "file" }
    | { source: "gmail"; type: "email" | "thread" }
    | { source: "http"; type: "record" | "request" | "webhook" }
    | { source: "sheets"; type: "row" }
    | { source: "slack"; type: "message" | "reaction" }
    | { source: "sql"; type: "row" }
    | { source: "system"; type: "random" | "schedule" };
  /** an external thing that happened, as ctx.registerInput records it */
  type InputRef = Source & {
    /** its identifier in the source (a message id, a file name) */
    id: string | number;
    /** what it is, to a person (at most 500 characters) */
    title: string;
  };
  /** ctx in a producer */
  interface ProducerCtx extends BaseCtx {
    calendar: {
      /** Lists events, by start time (recurring events as their single occurrences). */
      listEvents(args?: connector.calendar.ListEventsArgs): Promise<connector.calendar.ListEventsResult>;
    };
    email: {
      /** Reads one attachment's bytes, named by its `ref` from email.search. */
      attachment(args: connector.email.AttachmentArgs): Promise<connector.email.AttachmentResult>;
      /** Lists messages of a folder, oldest first. */
      search(args?: connector.email.SearchArgs): Promise<connector.email.SearchResult>;
    };
    files: {
      /** Lists the regular files of a folder whose names match a glob, sorted by name (folders, devices and links out of the root are left out). */
      list(args?: connector.files.ListArgs): Promise<connector.files.ListResult>;
      /** Reads one file as text. */
      read(args: connector.files.ReadArgs): Promise<connector.files.ReadResult>;
    };
    gmail: {
      /** Reads one message with its body. */
      get(args: connector.gmail.GetArgs): Promise<connector.gmail.GetResult>;
      /** Finds messages with Gmail's search syntax and, from one poll to the next, the messages that came into the mailbox since: Gmail's history (messages added), whatever their date, so mail Gmail delivers or indexes late is seen too. */
      search(args?: connector.gmail.SearchArgs): Promise<connector.gmail.SearchResult>;
    };
    http: {
      /** Sends one HTTP request. A write carries the header `Idempotency-Key: keep-…`, the same for every attempt of the same write, so a server that honours it applies the write once. */
      request(args: connector.http.RequestArgs & ({ method?: "GET" | "HEAD" | "get" | "head"; kind?: undefined } | { method?: "GET" | "HEAD" | "get" | "head"; kind: "byId" })): Promise<connector.http.RequestResult>;
    };
    sheets: {
      /** Reads rows as Sheets shows them (formatted values). */
      getRows(args: connector.sheets.GetRowsArgs): Promise<connector.sheets.GetRowsResult>;
    };
    slack: {
      /** Reads a channel's messages, oldest first. A thread's replies are not among them (Slack's `conversations.history` lists a thread's parent only; a reply also sent to the channel is listed). */
      history(args: connector.slack.HistoryArgs): Promise<connector.slack.HistoryResult>;
    };
    sql: {
      /** Runs a query and returns its rows. */
      query(args: connector.sql.QueryArgs): Promise<connector.sql.QueryResult>;
    };
    /** records an external thing that happened; returns its input id (the same for the same source, type and id) */
    registerInput(input: InputRef): string;
    /** an event for the consumers of the topic(s), written when the run commits */
    publish(topics: string | string[], event: { inputId: string; messageId?: string | number; payload?: any }): Promise<void>;
  }
  /** ctx in a webhook's handler */
  interface WebhookCtx extends BaseCtx {
    calendar: {
      /** Lists events, by start time (recurring events as their single occurrences). */
      listEvents(args?: connector.calendar.ListEventsArgs): Promise<connector.calendar.ListEventsResult>;
    };
    email: {
      /** Reads one attachment's bytes, named by its `ref` from email.search. */
      attachment(args: connector.email.AttachmentArgs): Promise<connector.email.AttachmentResult>;
      /** Lists messages of a folder, oldest first. */
      search(args?: connector.email.SearchArgs): Promise<connector.email.SearchResult>;
    };
    files: {
      /** Lists the regular files of a folder whose names match a glob, sorted by name (folders, devices and links out of the root are left out). */
      list(args?: connector.files.ListArgs): Promise<connector.files.ListResult>;
      /** Reads one file as text. */
      read(args: connector.files.ReadArgs): Promise<connector.files.ReadResult>;
    };
    gmail: {
      /** Reads one message with its body. */
      get(args: connector.gmail.GetArgs): Promise<connector.gmail.GetResult>;
      /** Finds messages with Gmail's search syntax and, from one poll to the next, the messages that came into the mailbox since: Gmail's history (messages added), whatever their date, so mail Gmail delivers or indexes late is seen too. */
      search(args?: connector.gmail.SearchArgs): Promise<connector.gmail.SearchResult>;
    };
    http: {
      /** Sends one HTTP request. A write carries the header `Idempotency-Key: keep-…`, the same for every attempt of the same write, so a server that honours it applies the write once. */
      request(args: connector.http.RequestArgs & ({ method?: "GET" | "HEAD" | "get" | "head"; kind?: undefined } | { method?: "GET" | "HEAD" | "get" | "head"; kind: "byId" })): Promise<connector.http.RequestResult>;
    };
    sheets: {
      /** Reads rows as Sheets shows them (formatted values). */
      getRows(args: connector.sheets.GetRowsArgs): Promise<connector.sheets.GetRowsResult>;
    };
    slack: {
      /** Reads a channel's messages, oldest first. A thread's replies are not among them (Slack's `conversations.history` lists a thread's parent only; a reply also sent to the channel is listed). */
      history(args: connector.slack.HistoryArgs): Promise<connector.slack.HistoryResult>;
    };
    sql: {
      /** Runs a query and returns its rows. */
      query(args: connector.sql.QueryArgs): Promise<connector.sql.QueryResult>;
    };
    /** records an external thing that happened; returns its input id (the same for the same source, type and id) */
    registerInput(input: InputRef): string;
    /** an event for the consumers of the topic(s), written when the run commits */
    publish(topics: string | string[], event: { inputId: string; messageId?: string | number; payload?: any }): Promise<void>;
  }
  /** ctx in prepare */
  interface PrepareCtx extends BaseCtx {
    calendar: {
      /** Lists events, by start time (recurring events as their single occurrences). */
      listEvents(args?: connector.calendar.ListEventsArgs): Promise<connector.calendar.ListEventsResult>;
    };
    email: {
      /** Reads one attachment's bytes, named by its `ref` from email.search. */
      attachment(args: connector.email.AttachmentArgs): Promise<connector.email.AttachmentResult>;
      /** Lists messages of a folder, oldest first. */
      search(args?: connector.email.SearchArgs): Promise<connector.email.SearchResult>;
    };
    files: {
      /** Lists the regular files of a folder whose names match a glob, sorted by name (folders, devices and links out of the root are left out). */
      list(args?: connector.files.ListArgs): Promise<connector.files.ListResult>;
      /** Reads one file as text. */
      read(args: connector.files.ReadArgs): Promise<connector.files.ReadResult>;
    };
    gmail: {
      /** Reads one message with its body. */
      get(args: connector.gmail.GetArgs): Promise<connector.gmail.GetResult>;
      /** Finds messages with Gmail's search syntax and, from one poll to the next, the messages that came into the mailbox since: Gmail's history (messages added), whatever their date, so mail Gmail delivers or indexes late is seen too. */
      search(args?: connector.gmail.SearchArgs): Promise<connector.gmail.SearchResult>;
    };
    http: {
      /** Sends one HTTP request. A write carries the header `Idempotency-Key: keep-…`, the same for every attempt of the same write, so a server that honours it applies the write once. */
      request(args: connector.http.RequestArgs & ({ method?: "GET" | "HEAD" | "get" | "head"; kind?: undefined } | { method?: "GET" | "HEAD" | "get" | "head"; kind: "byId" })): Promise<connector.http.RequestResult>;
    };
    sheets: {
      /** Reads rows as Sheets shows them (formatted values). */
      getRows(args: connector.sheets.GetRowsArgs): Promise<connector.sheets.GetRowsResult>;
    };
    slack: {
      /** Reads a channel's messages, oldest first. A thread's replies are not among them (Slack's `conversations.history` lists a thread's parent only; a reply also sent to the channel is listed). */
      history(args: connector.slack.HistoryArgs): Promise<connector.slack.HistoryResult>;
    };
    sql: {
      /** Runs a query and returns its rows. */
      query(args: connector.sql.QueryArgs): Promise<connector.sql.QueryResult>;
    };
    /** pending, unreserved events of a subscribed topic, oldest first */
    peek(topic: string, opts?: { limit?: number }): Promise<Event[]>;
    /** those events of a subscribed topic, whatever their status (missing ones left out) */
    getByIds(topic: string, ids: string[]): Promise<Event[]>;
  }
  /** ctx in mutate */
  interface MutateCtx extends BaseCtx {
    calendar: {
      /** Creates an event whose id is made from the write's idempotency key: a second attempt of the same write cannot create a second event. */
      createEvent(args: connector.calendar.CreateEventArgs): Promise<void>;
      /** Changes the given fields of an event (the others stay). */
      updateEvent(args: connector.calendar.UpdateEventArgs): Promise<void>;
    };
    email: {
      /** Reads one attachment's bytes, named by its `ref` from email.search. */
      attachment(args: connector.email.AttachmentArgs): Promise<connector.email.AttachmentResult>;
      /** Sends a message over SMTP from `from`. Its Message-ID is made from the write's idempotency key (the same for every attempt of the same write, different in every installation) and the key travels in `X-Keep-Idempotency-Key`. After sending keep makes sure a copy is in Sent: the server's own (`server_keeps_sent`, looked for) or one keep files (APPEND, creating `Sent` when the mailbox has none). [policy] tool_timeout bounds the whole send. */
      send(args: connector.email.SendArgs): Promise<void>;
    };
    files: {
      /** Reads one file as text. */
      read(args: connector.files.ReadArgs): Promise<connector.files.ReadResult>;
      /** Writes one file atomically (a temporary file, fsync, rename): a crash leaves the old content or the new, never half. Folders are created. */
      write(args: connector.files.WriteArgs): Promise<void>;
    };
    gmail: {
      /** Reads one message with its body. */
      get(args: connector.gmail.GetArgs): Promise<connector.gmail.GetResult>;
      /** Adds and removes labels of a message. Labels are names (`Processed`) or Gmail's system labels (`INBOX`, `UNREAD`, `STARRED`, `IMPORTANT`); a label to add that does not exist is created. */
      modifyLabels(args: connector.gmail.ModifyLabelsArgs): Promise<void>;
      /** Sends a message from the connected account. Its Message-ID is made from the write's idempotency key (the same for every attempt of the same write), and the key travels in the header `X-Keep-Idempotency-Key` (Gmail may replace the Message-ID; the header stays). A reply (`threadId`) carries `In-Reply-To` and `References` naming the thread's last message, which keep reads first: Gmail puts a sent message in the thread only with them and a matching subject (`Re: ` + the thread's subject). */
      send(args: connector.gmail.SendArgs): Promise<void>;
    };
    http: {
      /** Sends one HTTP request. A write carries the header `Idempotency-Key: keep-…`, the same for every attempt of the same write, so a server that honours it applies the write once. */
      request(args: connector.http.RequestArgs & ({ method?: "GET" | "HEAD" | "get" | "head"; kind: "byId" })): Promise<connector.http.RequestResult>;
      /** Sends one HTTP request. A write carries the header `Idempotency-Key: keep-…`, the same for every attempt of the same write, so a server that honours it applies the write once. */
      request(args: connector.http.RequestArgs & ({ method: "POST" | "PUT" | "PATCH" | "DELETE" | "post" | "put" | "patch" | "delete" })): Promise<void>;
    };
    sheets: {
      /** Appends one row after the last row of the sheet. Values are written as they are (a text starting with `=` stays text, never a formula). The Sheets API has no idempotency key, so the row's first cell carries a note `keep:<key>` written in the same request as the row: that note is how keep finds its own row again. Leave it in place. */
      appendRow(args: connector.sheets.AppendRowArgs): Promise<void>;
      /** Overwrites the cells of one row from column A (cells past `values` are left as they are). */
      updateRow(args: connector.sheets.UpdateRowArgs): Promise<void>;
    };
    slack: {
      /** Adds the bot's reaction to a message (a reaction the bot already gave counts as done). */
      addReaction(args: connector.slack.AddReactionArgs): Promise<void>;
      /** Posts a message as the bot. The message's metadata carries the write's idempotency key (`event_type: keep_write`). */
      postMessage(args: connector.slack.PostMessageArgs): Promise<void>;
    };
    sql: {
      /** Runs one statement exactly once. keep runs it in a transaction with an insert into the database's own `keep_mutations` table (created on first use: the write's idempotency key and its result); a second attempt of the same write finds that row and returns the recorded result without running the statement again. */
      exec(args: connector.sql.ExecArgs): Promise<void>;
    };
  }
  /** ctx in next */
  interface NextCtx extends BaseCtx {
    /** an event for the consumers of the topic(s), written when the run commits */
    publish(topics: string | string[], event: { messageId: string | number; payload?: any }): Promise<void>;
  }
  /** ctx in a task's run */
  interface TaskCtx extends BaseCtx {
    calendar: {
      /** Lists events, by start time (recurring events as their single occurrences). */
      listEvents(args?: connector.calendar.ListEventsArgs): Promise<connector.calendar.ListEventsResult>;
    };
    email: {
      /** Reads one attachment's bytes, named by its `ref` from email.search. */
      attachment(args: connector.email.AttachmentArgs): Promise<connector.email.AttachmentResult>;
      /** Lists messages of a folder, oldest first. */
      search(args?: connector.email.SearchArgs): Promise<connector.email.SearchResult>;
    };
    files: {
      /** Lists the regular files of a folder whose names match a glob, sorted by name (folders, devices and links out of the root are left out). */
      list(args?: connector.files.ListArgs): Promise<connector.files.ListResult>;
      /** Reads one file as text. */
      read(args: connector.files.ReadArgs): Promise<connector.files.ReadResult>;
    };
    gmail: {
      /** Reads one message with its body. */
      get(args: connector.gmail.GetArgs): Promise<connector.gmail.GetResult>;
      /** Finds messages with Gmail's search syntax and, from one poll to the next, the messages that came into the mailbox since: Gmail's history (messages added), whatever their date, so mail Gmail delivers or indexes late is seen too. */
      search(args?: connector.gmail.SearchArgs): Promise<connector.gmail.SearchResult>;
    };
    http: {
      /** Sends one HTTP request. A write carries the header `Idempotency-Key: keep-…`, the same for every attempt of the same write, so a server that honours it applies the write once. */
      request(args: connector.http.RequestArgs & ({ method?: "GET" | "HEAD" | "get" | "head"; kind?: undefined } | { method?: "GET" | "HEAD" | "get" | "head"; kind: "byId" })): Promise<connector.http.RequestResult>;
    };
    sheets: {
      /** Reads rows as Sheets shows them (formatted values). */
      getRows(args: connector.sheets.GetRowsArgs): Promise<connector.sheets.GetRowsResult>;
    };
    slack: {
      /** Reads a channel's messages, oldest first. A thread's replies are not among them (Slack's `conversations.history` lists a thread's parent only; a reply also sent to the channel is listed). */
      history(args: connector.slack.HistoryArgs): Promise<connector.slack.HistoryResult>;
    };
    sql: {
      /** Runs a query and returns its rows. */
      query(args: connector.sql.QueryArgs): Promise<connector.sql.QueryResult>;
    };
    /** works on one item: every write happens in its handler, through the ledger */
    withItem(id: string, title: string, handler: (ctx: ItemCtx) => unknown): Promise<void>;
  }
  /** ctx in withItem's handler */
  interface ItemCtx extends BaseCtx {
    calendar: {
      /** Creates an event whose id is made from the write's idempotency key: a second attempt of the same write cannot create a second event. */
      createEvent(args: connector.calendar.CreateEventArgs): Promise<connector.calendar.CreateEventResult>;
      /** Lists events, by start time (recurring events as their single occurrences). */
      listEvents(args?: connector.calendar.ListEventsArgs): Promise<connector.calendar.ListEventsResult>;
      /** Changes the given fields of an event (the others stay). */
      updateEvent(args: connector.calendar.UpdateEventArgs): Promise<connector.calendar.UpdateEventResult>;
    };
    email: {
      /** Reads one attachment's bytes, named by its `ref` from email.search. */
      attachment(args: connector.email.AttachmentArgs): Promise<connector.email.AttachmentResult>;
      /** Lists messages of a folder, oldest first. */
      search(args?: connector.email.SearchArgs): Promise<connector.email.SearchResult>;
      /** Sends a message over SMTP from `from`. Its Message-ID is made from the write's idempotency key (the same for every attempt of the same write, different in every installation) and the key travels in `X-Keep-Idempotency-Key`. After sending keep makes sure a copy is in Sent: the server's own (`server_keeps_sent`, looked for) or one keep files (APPEND, creating `Sent` when the mailbox has none). [policy] tool_timeout bounds the whole send. */
      send(args: connector.email.SendArgs): Promise<connector.email.SendResult>;
    };
    files: {
      /** Lists the regular files of a folder whose names match a glob, sorted by name (folders, devices and links out of the root are left out). */
      list(args?: connector.files.ListArgs): Promise<connector.files.ListResult>;
      /** Reads one file as text. */
      read(args: connector.files.ReadArgs): Promise<connector.files.ReadResult>;
      /** Writes one file atomically (a temporary file, fsync, rename): a crash leaves the old content or the new, never half. Folders are created. */
      write(args: connector.files.WriteArgs): Promise<connector.files.WriteResult>;
    };
    gmail: {
      /** Reads one message with its body. */
      get(args: connector.gmail.GetArgs): Promise<connector.gmail.GetResult>;
      /** Adds and removes labels of a message. Labels are names (`Processed`) or Gmail's system labels (`INBOX`, `UNREAD`, `STARRED`, `IMPORTANT`); a label to add that does not exist is created. */
      modifyLabels(args: connector.gmail.ModifyLabelsArgs): Promise<connector.gmail.ModifyLabelsResult>;
      /** Finds messages with Gmail's search syntax and, from one poll to the next, the messages that came into the mailbox since: Gmail's history (messages added), whatever their date, so mail Gmail delivers or indexes late is seen too. */
      search(args?: connector.gmail.SearchArgs): Promise<connector.gmail.SearchResult>;
      /** Sends a message from the connected account. Its Message-ID is made from the write's idempotency key (the same for every attempt of the same write), and the key travels in the header `X-Keep-Idempotency-Key` (Gmail may replace the Message-ID; the header stays). A reply (`threadId`) carries `In-Reply-To` and `References` naming the thread's last message, which keep reads first: Gmail puts a sent message in the thread only with them and a matching subject (`Re: ` + the thread's subject). */
      send(args: connector.gmail.SendArgs): Promise<connector.gmail.SendResult>;
    };
    http: {
      /** Sends one HTTP request. A write carries the header `Idempotency-Key: keep-…`, the same for every attempt of the same write, so a server that honours it applies the write once. */
      request(args: connector.http.RequestArgs): Promise<connector.http.RequestResult>;
    };
    sheets: {
      /** Appends one row after the last row of the sheet. Values are written as they are (a text starting with `=` stays text, never a formula). The Sheets API has no idempotency key, so the row's first cell carries a note `keep:<key>` written in the same request as the row: that note is how keep finds its own row again. Leave it in place. */
      appendRow(args: connector.sheets.AppendRowArgs): Promise<connector.sheets.AppendRowResult>;
      /** Reads rows as Sheets shows them (formatted values). */
      getRows(args: connector.sheets.GetRowsArgs): Promise<connector.sheets.GetRowsResult>;
      /** Overwrites the cells of one row from column A (cells past `values` are left as they are). */
      updateRow(args: connector.sheets.UpdateRowArgs): Promise<connector.sheets.UpdateRowResult>;
    };
    slack: {
      /** Adds the bot's reaction to a message (a reaction the bot already gave counts as done). */
      addReaction(args: connector.slack.AddReactionArgs): Promise<connector.slack.AddReactionResult>;
      /** Reads a channel's messages, oldest first. A thread's replies are not among them (Slack's `conversations.history` lists a thread's parent only; a reply also sent to the channel is listed). */
      history(args: connector.slack.HistoryArgs): Promise<connector.slack.HistoryResult>;
      /** Posts a message as the bot. The message's metadata carries the write's idempotency key (`event_type: keep_write`). */
      postMessage(args: connector.slack.PostMessageArgs): Promise<connector.slack.PostMessageResult>;
    };
    sql: {
      /** Runs one statement exactly once. keep runs it in a transaction with an insert into the database's own `keep_mutations` table (created on first use: the write's idempotency key and its result); a second attempt of the same write finds that row and returns the recorded result without running the statement again. */
      exec(args: connector.sql.ExecArgs): Promise<connector.sql.ExecResult>;
      /** Runs a query and returns its rows. */
      query(args: connector.sql.QueryArgs): Promise<connector.sql.QueryResult>;
    };
    readonly item: Item;
  }
  /** A workflow's tests, run by keep test FILE: end a test file with export default Keep.test({ workflow: "./workflow.js", cases: { ... } }). */
  function test(t: Test): Test;
  interface Test {
    /** the workflow script, relative to the test file */
    workflow: string;
    cases: { [name: string]: TestCase };
  }
  interface TestCase {
    /** what each call answers: the first entry whose args all equal the call's (no args: any call) */
    answers?: TestAnswers;
    /** the next times matching calls fail so instead, as a real service's would */
    faults?: TestFaults;
    /** events posted to topics open to keep's event API ({ from: "api" }), as keep publish does, before the workflow runs */
    events?: { [topic: string]: Array<{ id: string; title: string; payload?: any }> };
    /** requests to the workflow's webhooks, signed as each one's verify says, delivered as keep serve does, after the events */
    webhooks?: { [webhook: string]: Array<{ headers?: { [name: string]: string }; query?: { [name: string]: string }; json?: any; body?: string }> };
    /** a person's decisions, in order, each on the blocked run whose card says its text, once the workflow is idle */
    decide?: Array<{ card: string; action: "skip" | "try-again" | "didnt-happen" | "approve" | "reprocess" }>;
    /** checked once the workflow is idle */
    expect: TestExpect;
  }
  interface TestExpect {
    /** every write made, in order (one sent twice shows twice) */
    writes?: Array<{ tool: WriteMethod; target?: string; payload?: { [param: string]: any } }>;
    inputs?: Array<{ title: string; status?: TestItemStatus }>;
    items?: Array<{ title: string; status?: TestItemStatus }>;
    /** how many runs end in each status named */
    runs?: { [status in TestRunStatus]?: number };
    /** one text per blocked run, found in its card; none: nothing may be blocked */
    blocked?: string[];
  }
  /** a test's answer: any part of what the method returns */
  type DeepPartial<T> = T extends (infer U)[] ? DeepPartial<U>[] : T extends object ? { [K in keyof T]?: DeepPartial<T[K]> } : T;
  /** a fault keep test knows */
  type TestFault = "401" | "403" | "429" | "500" | "500AfterApply" | "503" | "drop" | "dropAfterApply" | "timeout" | "timeoutAfterApply";
  /** an input's or item's status */
  type TestItemStatus = "pending" | "processing" | "done" | "failed" | "skipped" | "needs_attention";
  /** a run's status */
  type TestRunStatus = "active" | "paused:transient" | "paused:approval" | "paused:reconciliation" | "failed:logic" | "failed:internal" | "crashed" | "committed" | "retried" | "skipped";
  interface TestAnswers {
    "calendar.createEvent"?: Array<{ args?: Partial<connector.calendar.CreateEventArgs>; answer: DeepPartial<connector.calendar.CreateEventResult> }>;
    "calendar.listEvents"?: Array<{ args?: Partial<connector.calendar.ListEventsArgs>; answer: DeepPartial<connector.calendar.ListEventsResult> }>;
    "calendar.updateEvent"?: Array<{ args?: Partial<connector.calendar.UpdateEventArgs>; answer: DeepPartial<connector.calendar.UpdateEventResult> }>;
    "email.attachment"?: Array<{ args?: Partial<connector.email.AttachmentArgs>; answer: DeepPartial<connector.email.AttachmentResult> }>;
    "email.search"?: Array<{ args?: Partial<connector.email.SearchArgs>; answer: DeepPartial<connector.email.SearchResult> }>;
    "email.send"?: Array<{ args?: Partial<connector.email.SendArgs>; answer: DeepPartial<connector.email.SendResult> }>;
    "files.list"?: Array<{ args?: Partial<connector.files.ListArgs>; answer: DeepPartial<connector.files.ListResult> }>;
    "files.read"?: Array<{ args?: Partial<connector.files.ReadArgs>; answer: DeepPartial<connector.files.ReadResult> }>;
    "files.write"?: Array<{ args?: Partial<connector.files.WriteArgs>; answer: DeepPartial<connector.files.WriteResult> }>;
    "gmail.get"?: Array<{ args?: Partial<connector.gmail.GetArgs>; answer: DeepPartial<connector.gmail.GetResult> }>;
    "gmail.modifyLabels"?: Array<{ args?: Partial<connector.gmail.ModifyLabelsArgs>; answer: DeepPartial<connector.gmail.ModifyLabelsResult> }>;
    "gmail.search"?: Array<{ args?: Partial<connector.gmail.SearchArgs>; answer: DeepPartial<connector.gmail.SearchResult> }>;
    "gmail.send"?: Array<{ args?: Partial<connector.gmail.SendArgs>; answer: DeepPartial<connector.gmail.SendResult> }>;
    "http.request"?: Array<{ args?: Partial<connector.http.RequestArgs>; answer: DeepPartial<connector.http.RequestResult> }>;
    "sheets.appendRow"?: Array<{ args?: Partial<connector.sheets.AppendRowArgs>; answer: DeepPartial<connector.sheets.AppendRowResult> }>;
    "sheets.getRows"?: Array<{ args?: Partial<connector.sheets.GetRowsArgs>; answer: DeepPartial<connector.sheets.GetRowsResult> }>;
    "sheets.updateRow"?: Array<{ args?: Partial<connector.sheets.UpdateRowArgs>; answer: DeepPartial<connector.sheets.UpdateRowResult> }>;
    "slack.addReaction"?: Array<{ args?: Partial<connector.slack.AddReactionArgs>; answer: DeepPartial<connector.slack.AddReactionResult> }>;
    "slack.history"?: Array<{ args?: Partial<connector.slack.HistoryArgs>; answer: DeepPartial<connector.slack.HistoryResult> }>;
    "slack.postMessage"?: Array<{ args?: Partial<connector.slack.PostMessageArgs>; answer: DeepPartial<connector.slack.PostMessageResult> }>;
    "sql.exec"?: Array<{ args?: Partial<connector.sql.ExecArgs>; answer: DeepPartial<connector.sql.ExecResult> }>;
    "sql.query"?: Array<{ args?: Partial<connector.sql.QueryArgs>; answer: DeepPartial<connector.sql.QueryResult> }>;
  }
  interface TestFaults {
    "calendar.createEvent"?: Array<{ args?: Partial<connector.calendar.CreateEventArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "calendar.listEvents"?: Array<{ args?: Partial<connector.calendar.ListEventsArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "calendar.updateEvent"?: Array<{ args?: Partial<connector.calendar.UpdateEventArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "email.attachment"?: Array<{ args?: Partial<connector.email.AttachmentArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "email.search"?: Array<{ args?: Partial<connector.email.SearchArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "email.send"?: Array<{ args?: Partial<connector.email.SendArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "files.list"?: Array<{ args?: Partial<connector.files.ListArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "files.read"?: Array<{ args?: Partial<connector.files.ReadArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "files.write"?: Array<{ args?: Partial<connector.files.WriteArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "gmail.get"?: Array<{ args?: Partial<connector.gmail.GetArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "gmail.modifyLabels"?: Array<{ args?: Partial<connector.gmail.ModifyLabelsArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "gmail.search"?: Array<{ args?: Partial<connector.gmail.SearchArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "gmail.send"?: Array<{ args?: Partial<connector.gmail.SendArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "http.request"?: Array<{ args?: Partial<connector.http.RequestArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "sheets.appendRow"?: Array<{ args?: Partial<connector.sheets.AppendRowArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "sheets.getRows"?: Array<{ args?: Partial<connector.sheets.GetRowsArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "sheets.updateRow"?: Array<{ args?: Partial<connector.sheets.UpdateRowArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "slack.addReaction"?: Array<{ args?: Partial<connector.slack.AddReactionArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "slack.history"?: Array<{ args?: Partial<connector.slack.HistoryArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "slack.postMessage"?: Array<{ args?: Partial<connector.slack.PostMessageArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "sql.exec"?: Array<{ args?: Partial<connector.sql.ExecArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
    "sql.query"?: Array<{ args?: Partial<connector.sql.QueryArgs>; fault: TestFault; times?: number; retryAfter?: number }>;
  }
  /** a method that writes, as a test's expect.writes names it */
  type WriteMethod = "calendar.createEvent" | "calendar.updateEvent" | "email.send" | "files.write" | "gmail.modifyLabels" | "gmail.send" | "http.request" | "sheets.appendRow" | "sheets.updateRow" | "slack.addReaction" | "slack.postMessage" | "sql.exec";
}

/** each connector method's arguments and result */
declare namespace Keep.connector {
  /** Google Calendar, through the Calendar API with the account of `keep connect google`. */
  namespace calendar {
    /** the arguments of ctx.calendar.createEvent */
    interface CreateEventArgs {
      /** the calendar (default `primary`, the account's own) */
      calendarId?: string;
      /** the title */
      summary: string;
      /** RFC 3339 time (`2026-12-01T10:00:00+01:00`) or a date (`2026-12-01`, all day) */
      start: string;
      /** as start; not before it */
      end: string;
      /** guests' email addresses */
      attendees?: string[];
      /** the description */
      description?: string;
      /** the location */
      location?: string;
      /** whom Google mails the invitation or the change: `all` guests, `externalOnly` (guests outside the account's domain) or `none` (the default: guests see it in their calendars, no mail) */
      sendUpdates?: string;
      /** tells apart two events one run creates in the same calendar */
      subkey?: string;
    }
    /** `{ id, summary, start, end, attendees, status, htmlLink }`; a reconciled create adds `reconciled: true` */
    type CreateEventResult = { id: string; summary: string; description: string; location: string; start: string; end: string; attendees: string[]; status: string; htmlLink: string; reconciled?: boolean };
    /** the arguments of ctx.calendar.listEvents */
    interface ListEventsArgs {
      /** the calendar (default `primary`, the account's own) */
      calendarId?: string;
      /** RFC 3339: events ending after it */
      from?: string;
      /** RFC 3339: events starting before it */
      to?: string;
      /** at most this many, 1 to 2500 (default 250) */
      max?: number;
    }
    /** an array of `{ id, summary, description, location, start, end, attendees, status, htmlLink }` (`start`/`end` a time, in the calendar's time zone as Google answers it, or a date) */
    type ListEventsResult = Array<{ id: string; summary: string; description: string; location: string; start: string; end: string; attendees: string[]; status: string; htmlLink: string }>;
    /** the arguments of ctx.calendar.updateEvent */
    interface UpdateEventArgs {
      /** the calendar (default `primary`, the account's own) */
      calendarId?: string;
      /** the event's id (identity) */
      eventId: string;
      /** the title */
      summary?: string;
      /** RFC 3339 time (`2026-12-01T10:00:00+01:00`) or a date (`2026-12-01`, all day) */
      start?: string;
      /** as start; not before it */
      end?: string;
      /** guests' email addresses */
      attendees?: string[];
      /** the description */
      description?: string;
      /** the location */
      location?: string;
      /** whom Google mails the invitation or the change: `all` guests, `externalOnly` (guests outside the account's domain) or `none` (the default: guests see it in their calendars, no mail) */
      sendUpdates?: string;
      /** tells apart two updates of one run to the same event */
      subkey?: string;
    }
    /** the event, as createEvent returns it */
    type UpdateEventResult = { id: string; summary: string; description: string; location: string; start: string; end: string; attendees: string[]; status: string; htmlLink: string; reconciled?: boolean };
  }
  /** Any mailbox over IMAP (reading) and SMTP (sending), set in keep.toml: `[connectors.email] imap = "imaps://user:password@host:993"`, `smtp = "smtp://user:password@host:587"` (STARTTLS; `smtps://` for TLS; plain only to a server on this machine unless `starttls = true`), `from = "me@example.com"`, `ca_file = "/path/ca.pem"` to trust a private CA, `sent_folder` (default: the folder marked \Sent, else `Sent`, created when absent), and `server_keeps_sent = true` only when the SMTP server files a copy of what it sends into Sent itself (Gmail, Exchange, Fastmail do; Postfix does not): keep checks that before relying on it. Credentials stay in keep.toml. */
  namespace email {
    /** the arguments of ctx.email.attachment */
    interface AttachmentArgs {
      /** an attachment's `ref` from email.search (it names the folder, the message and the part) */
      ref: string;
      /** the most bytes to read, 1 to 10485760 (10 MiB, the default): a larger attachment is refused, saying its size */
      max?: number;
    }
    /** `{ name, type, size, base64 }`: the attachment decoded from its transfer encoding (base64, quoted-printable; another, such as x-uuencode, as the message holds it), as base64 */
    type AttachmentResult = { name: string; type: string; size: number; base64: string };
    /** the arguments of ctx.email.search */
    interface SearchArgs {
      /** the folder (default `INBOX`) */
      folder?: string;
      /** a cursor: a previous result's `lastCursor`; only messages that arrived after it come back */
      after?: string;
      /** only messages whose From contains this */
      from?: string;
      /** only messages whose Subject contains this */
      subject?: string;
      /** only unread messages */
      unseen?: boolean;
      /** at most this many, 1 to 500 (default 100) */
      max?: number;
    }
    /** an array of `{ id, uid, from, to, subject, date, text, html?, attachments }` with properties `lastCursor` (pass it as the next `after`) and `more` (true when more messages matched than came back: the next search from `lastCursor` reads on, and a producer that returns the new cursor in its state runs again at once). `id` is the Message-ID; a message without one gets an id made from the message itself (a digest of its header, Received lines included, and its size: the same after its folder is rebuilt, different for two deliveries): register inputs by it. `from`/`to` with display names decoded; `text` the plain body decoded to UTF-8, made from the HTML when there is only HTML; `html` the HTML body when there is one; each at most 64 KiB. `attachments` lists every other part, `{ name, type, size, ref }` (`size` in bytes once decoded: as the server counts it where it can (BINARY, as Dovecot has), else estimated from the encoded size): their bytes are never downloaded by search — read one with `email.attachment({ ref })`. An answer holds at most about 8 MiB of texts: past that the rest waits for the next search (`more`). */
    type SearchResult = Array<{ id: string; uid: number; from: string; to: string; subject: string; date: string; text: string; html?: string; attachments: Array<{ name: string; type: string; size: number; ref: string }> }> & { lastCursor: string; more: boolean };
    /** the arguments of ctx.email.send */
    interface SendArgs {
      /** recipients (identity) */
      to: string | string[];
      /** the subject */
      subject: string;
      /** the plain-text body */
      text: string;
      /** an HTML body sent beside the text */
      html?: string;
      /** copies */
      cc?: string | string[];
      /** the Message-ID of the message this replies to (a message's `id` from email.search): sets In-Reply-To, so the reply threads */
      inReplyTo?: string;
      /** the Message-IDs of the thread, oldest first (default: `inReplyTo`) */
      references?: string | string[];
      /** tells apart two sends of one run to the same recipients */
      subkey?: string;
    }
    /** `{ messageId, sentFolder, filedBy }` (`filedBy` is `server` or `keep`); when the copy could not be filed, `{ messageId, notFiled }` saying why (the message was sent); a reconciled send adds `reconciled: true` */
    type SendResult = { messageId: string; sentFolder?: string; filedBy?: "server" | "keep"; notFiled?: string; reconciled?: boolean };
  }
  /** A local folder, no credentials: the script's folder (or `keep run`/`keep deploy --files-root DIR`), recorded when the workflow is deployed and used by `keep run` and `keep serve` alike (`keep status` shows it; `keep serve --files-root DIR` roots every workflow at DIR instead). Paths are relative to it; absolute paths, `..` and symbolic links that lead out of it are refused. keep's own files are refused whatever the root holds — its data directory (but its `files/` folder), every keep.toml keep reads, its store — through any path, link or hard link: the run fails as a logic error saying so, and a listing leaves them out. */
  namespace files {
    /** the arguments of ctx.files.list */
    interface ListArgs {
      /** the folder, relative to the root (default: the root) */
      dir?: string;
      /** a pattern for the file names, e.g. `*.json` (default `*`) */
      glob?: string;
    }
    /** an array of `{ path, name, size, modTime }` (`path` relative to the root, `modTime` an ISO time); `[]` when the folder does not exist. */
    type ListResult = Array<{ path: string; name: string; size: number; modTime: string }>;
    /** the arguments of ctx.files.read */
    interface ReadArgs {
      /** the file, relative to the root */
      path: string;
    }
    /** `{ path, content, sha256 }`. */
    type ReadResult = { path: string; content: string; sha256: string };
    /** the arguments of ctx.files.write */
    interface WriteArgs {
      /** the file, relative to the root */
      path: string;
      /** the whole new content (`JSON.stringify` objects) */
      content: string;
    }
    /** `{ path, sha256, bytes }`. */
    type WriteResult = { path: string; sha256: string; bytes: number };
  }
  /** A Gmail mailbox, through the Gmail API with the account of `keep connect google`. Try it without a Google account against `keep-fake google` (see the README). */
  namespace gmail {
    /** the arguments of ctx.gmail.get */
    interface GetArgs {
      /** the message's id (from search) */
      id: string;
    }
    /** `{ id, threadId, from, to, cc, subject, snippet, date, labels, text, html }`: `text` the plain body (or the HTML's text when there is none), `html` the HTML body or "" */
    type GetResult = { id: string; threadId: string; from: string; to: string; cc: string; subject: string; snippet: string; date: string; labels: string[]; text: string; html: string };
    /** the arguments of ctx.gmail.modifyLabels */
    interface ModifyLabelsArgs {
      /** the message's id (identity) */
      id: string;
      /** labels to add */
      add?: string | string[];
      /** labels to remove */
      remove?: string | string[];
      /** tells apart two label changes of one run on the same message */
      subkey?: string;
    }
    /** `{ id, labels }` (by name) */
    type ModifyLabelsResult = { id: string; labels: string[]; reconciled?: boolean };
    /** the arguments of ctx.gmail.search */
    interface SearchArgs {
      /** Gmail search, e.g. `from:alice has:attachment` or `in:inbox invoice` (default: all mail but spam and trash) */
      query?: string;
      /** a cursor: a previous result's `lastCursor`; only messages that came in since come back (a number of milliseconds since 1970 starts from that date) */
      after?: string;
      /** at most this many messages, 1 to 500 (default 100) */
      max?: number;
    }
    /** an array of `{ id, threadId, from, to, subject, snippet, date, labels }` (`date` RFC 3339, `labels` by name) with a property `lastCursor` to pass as the next `after` (so `return { cursor: emails.lastCursor }` never goes back, and more than `max` new messages are read over the next polls, none skipped). The first polls read the mailbox oldest first, `max` at a time; then each poll returns the messages Gmail added since, in the order they came. A message may come twice (one received in the cursor's millisecond during the first polls; every message after Gmail forgot the history id, typically a week without a poll, when keep reads the mailbox again as on the first poll): register it by `id`, which keeps one. */
    type SearchResult = Array<{ id: string; threadId: string; from: string; to: string; subject: string; snippet: string; date: string; labels: string[] }> & { lastCursor: string };
    /** the arguments of ctx.gmail.send */
    interface SendArgs {
      /** recipients (identity: with `threadId`, what the write is to) */
      to: string | string[];
      /** the subject */
      subject: string;
      /** the plain-text body */
      text: string;
      /** an HTML body sent beside the text */
      html?: string;
      /** copies */
      cc?: string | string[];
      /** the thread to reply in (from search or get); give the thread's subject, `Re: …` */
      threadId?: string;
      /** tells apart two sends of one run to the same recipients */
      subkey?: string;
    }
    /** `{ id, threadId, messageId }`; a reconciled send adds `reconciled: true` */
    type SendResult = { id: string; threadId: string; messageId: string; reconciled?: boolean };
  }
  /** Any HTTP API. Redirects are not followed; responses are capped at 8 MiB. Addresses of this machine and its private networks (loopback, private, link-local, cloud metadata) are refused unless keep.toml allows the host: `[connectors.http] allow = ["127.0.0.1:8090"]`. Credentials stay in keep, not in the script: `keep secret set NAME --host api.example.com`, then name it in a header, e.g. `headers: { Authorization: "Bearer {secret:NAME}" }` (or in the URL's query: `?key={secret:NAME}`); keep fills it in at the call, only for a workflow granted `secret:NAME` and only toward the secret's hosts, and masks it wherever a call is shown. */
  namespace http {
    /** the arguments of ctx.http.request */
    interface RequestArgs {
      /** an absolute http(s) URL */
      url: string;
      /** GET (default), HEAD, POST, PUT, PATCH or DELETE */
      method?: "GET" | "HEAD" | "get" | "head" | "POST" | "PUT" | "PATCH" | "DELETE" | "post" | "put" | "patch" | "delete";
      /** request headers */
      headers?: Record<string, string>;
      /** a body sent as JSON (sets `Content-Type: application/json`) */
      json?: unknown;
      /** a raw body (not with `json`) */
      body?: string;
      /** the call's time limit, 1 to 600000 ms (default: the policy's `tool_timeout`) */
      timeoutMs?: number;
      /** a probe that finds the write afterwards; `{idempotencyKey}` in its url is replaced by the write's key. Without it an uncertain write goes to a person */
      reconcile?: { method?: "GET" | "HEAD" | "get" | "head"; url: string; headers?: Record<string, string> };
      /** tells apart two writes of one run to the same method and url */
      subkey?: string;
      /** marks a GET or HEAD as a read of one thing by its id, which `mutate` may make (list and search reads it may not) */
      kind?: "byId";
    }
    /** `{ status, headers, body, json }`: `headers` in lower case (no `set-cookie`), `body` the text, `json` the parsed body or `null`. A reconciled write returns the probe's answer with `reconciled: true` and `via` (the probe's method and url). */
    type RequestResult = { status: number; headers: Record<string, string>; body: string; json: any; reconciled?: boolean; via?: string };
  }
  /** Google Sheets, through the Sheets API with the account of `keep connect google`. Rows are numbered as Sheets numbers them (the first row is 1). */
  namespace sheets {
    /** the arguments of ctx.sheets.appendRow */
    interface AppendRowArgs {
      /** the spreadsheet's id (from its URL: /spreadsheets/d/ID/edit) */
      spreadsheetId: string;
      /** the sheet's (tab's) title (default: the first sheet) */
      sheet?: string;
      /** the row's cells, from column A */
      values: Array<string | number | boolean>;
      /** tells apart two appends of one run to the same sheet */
      subkey?: string;
    }
    /** `{ rowId, range }`: the new row's number and its A1 range, like `Sheet1!A5:B5`; a reconciled append adds `reconciled: true` */
    type AppendRowResult = { rowId: number; range: string; reconciled?: boolean };
    /** the arguments of ctx.sheets.getRows */
    interface GetRowsArgs {
      /** the spreadsheet's id (from its URL: /spreadsheets/d/ID/edit) */
      spreadsheetId: string;
      /** the sheet's (tab's) title (default: the first sheet) */
      sheet?: string;
      /** A1 cells within the sheet, like `A2:D` (default: the whole sheet) */
      range?: string;
    }
    /** an array of `{ rowId, values }`: `rowId` the row's number, `values` its cells as strings (empty rows come as `values: []`) */
    type GetRowsResult = Array<{ rowId: number; values: string[] }>;
    /** the arguments of ctx.sheets.updateRow */
    interface UpdateRowArgs {
      /** the spreadsheet's id (from its URL: /spreadsheets/d/ID/edit) */
      spreadsheetId: string;
      /** the sheet's (tab's) title (default: the first sheet) */
      sheet?: string;
      /** the row's number (from appendRow or getRows) */
      rowId: number;
      /** the new cells */
      values: Array<string | number | boolean>;
      /** tells apart two updates of one run to the same row */
      subkey?: string;
    }
    /** `{ rowId, range }` */
    type UpdateRowResult = { rowId: number; range: string; reconciled?: boolean };
  }
  /** A Slack workspace, as the bot whose token `keep connect slack --token xoxb-…` stored. Invite the bot to the channels it reads and writes. */
  namespace slack {
    /** the arguments of ctx.slack.addReaction */
    interface AddReactionArgs {
      /** a channel id (`C0123…`) or name (`#ops`; keep resolves a name to its ID once, with `conversations.list`, and keeps it) */
      channel: string;
      /** the message's ts */
      ts: string;
      /** the emoji's name, without colons (`white_check_mark`) */
      name: string;
    }
    /** `{ channel, ts, name }` */
    type AddReactionResult = { channel: string; ts: string; name: string; reconciled?: boolean };
    /** the arguments of ctx.slack.history */
    interface HistoryArgs {
      /** a channel id (`C0123…`) or name (`#ops`; keep resolves a name to its ID once, with `conversations.list`, and keeps it) */
      channel: string;
      /** a cursor: a previous result's `lastCursor` (a message `ts`); only later messages come back, the oldest first. `"0"` starts at the channel's first message; without it, the latest `limit` messages come back */
      after?: string;
      /** at most this many, 1 to 999 (default 100) */
      limit?: number;
    }
    /** an array of `{ ts, user, text, threadTs }` (`ts` is the message's id: register inputs by it) with a property `lastCursor`: the last message returned (or `after` again when nothing came), so more than `limit` new messages are read over the next polls, none skipped */
    type HistoryResult = Array<{ ts: string; user: string; text: string; threadTs: string }> & { lastCursor: string };
    /** the arguments of ctx.slack.postMessage */
    interface PostMessageArgs {
      /** a channel id (`C0123…`) or name (`#ops`; keep resolves a name to its ID once, with `conversations.list`, and keeps it) */
      channel: string;
      /** the message (Slack's mrkdwn) */
      text: string;
      /** reply in this message's thread */
      threadTs?: string;
      /** tells apart two posts of one run to the same channel */
      subkey?: string;
    }
    /** `{ channel, ts }`; a reconciled post adds `reconciled: true` */
    type PostMessageResult = { channel: string; ts: string; reconciled?: boolean };
  }
  /** PostgreSQL, MariaDB/MySQL and SQLite databases declared in keep.toml. Credentials stay in keep.toml; scripts name a database, never a URL. */
  namespace sql {
    /** the arguments of ctx.sql.exec */
    interface ExecArgs {
      /** a database named in keep.toml: `[connectors.sql.databases] NAME = "postgres://…"` (or `mysql://…`, `sqlite:///…`) */
      db: string;
      /** one statement, with placeholders `$1, $2…` (PostgreSQL) or `?` (MariaDB/MySQL, SQLite) */
      sql: string;
      /** the placeholders' values, bound by the driver (never spliced into the text): numbers, strings, booleans, null, bytes as `{ base64: "…" }`; an integer beyond 2^53 as a string */
      args?: unknown[];
      /** tells apart two runs of the same statement in one run */
      subkey?: string;
    }
    /** `{ rowsAffected, rows }`: `rows` (as sql.query returns them) only when the statement returns rows (`INSERT … RETURNING id`), kept with the write's result; a write found already done returns the recorded result and adds `replayed: true` (on the second attempt) or `reconciled: true` (by reconcile) */
    type ExecResult = { rowsAffected: number; rows?: Array<Record<string, any>>; replayed?: boolean; reconciled?: boolean };
    /** the arguments of ctx.sql.query */
    interface QueryArgs {
      /** a database named in keep.toml: `[connectors.sql.databases] NAME = "postgres://…"` (or `mysql://…`, `sqlite:///…`) */
      db: string;
      /** one statement, with placeholders `$1, $2…` (PostgreSQL) or `?` (MariaDB/MySQL, SQLite) */
      sql: string;
      /** the placeholders' values, bound by the driver (never spliced into the text): numbers, strings, booleans, null, bytes as `{ base64: "…" }`; an integer beyond 2^53 as a string */
      args?: unknown[];
    }
    /** an array of rows, each an object by column name, each value as it travels (see "How values travel" above: integers beyond 2^53 and NUMERIC as strings, bytes as `{ base64 }`, JSON parsed, times without a zone kept without one), at most 10000 rows and 8 MiB */
    type QueryResult = Array<Record<string, any>>;
  }
}

/** what a consumer's prepare returns: Keep.PrepareResult, by its short name for JSDoc in a script's own functions */
type PrepareResult<D = any> = Keep.PrepareResult<D>;
declare var console: {
  log(...values: any[]): void;
  info(...values: any[]): void;
  warn(...values: any[]): void;
  error(...values: any[]): void;
  debug(...values: any[]): void;
};
