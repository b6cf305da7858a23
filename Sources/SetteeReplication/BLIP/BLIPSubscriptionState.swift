import SetteeJSON

/// One BLIP connection's `subChanges` subscriptions, as a passive side keeps them (replication-protocol.adoc
/// §subChanges, §unsubChanges; Sync Gateway's `handleSubChanges`/`handleUnsubChanges`): at most one subscription at
/// a time (Sync Gateway #3222), its feed started only once the empty `subChanges` answer is queued (the feed's first
/// `changes` must not overtake it), `unsubChanges` ending it so a new one may start, and at most `maxLiveFeeds` feed
/// tasks still running (the current one plus ended ones that have not returned: one cancelled while it waits for room
/// in the outgoing queue returns only when there is room), so a peer alternating `subChanges` and `unsubChanges`
/// cannot pile up feeds. A value the handler keeps under its lock; `launch` starts the feed's task, whose end the
/// handler reports with `ended(generation:)`.
///
/// Used by the gateway's `BLIPSyncHandler` (`Limits.gatewayBLIPMaxLiveFeeds`) and Lite's `BLIPReplicationServer`
/// (`Limits.liteListenerBLIPMaxLiveFeeds`).
public struct BLIPSubscriptionState<Feed: Sendable>: Sendable {
    /// Feed tasks that may run at once, ended ones still returning included.
    public let maxLiveFeeds: Int
    /// A subscription is current (accepted, running or about to).
    public private(set) var subscribed = false
    /// The feed `subscribe` accepted, not started yet.
    public private(set) var pending: Feed?
    /// The current feed's task.
    public private(set) var task: Task<Void, Never>?
    /// Counts subscriptions: a feed ending clears `subscribed` only when it is still the current one.
    public private(set) var generation = 0
    /// Feed tasks started and not yet returned.
    public private(set) var liveFeeds = 0
    /// The connection is closing: no more subscriptions.
    public private(set) var closed = false

    public init(maxLiveFeeds: Int) { self.maxLiveFeeds = maxLiveFeeds }

    /// `subChanges` accepted: `feed` waits for `launch`.
    /// - Throws: `CouchError` 503 when the connection is closing, 409 when a subscription is current (Sync
    ///   Gateway's text), 429 when `maxLiveFeeds` feeds are still running.
    public mutating func subscribe(_ feed: Feed) throws(CouchError) {
        guard !closed else { throw .unavailable("The connection is closing") }
        guard !subscribed else {
            throw .conflict("This connection already has an outstanding subChanges; cannot open another one")
        }
        guard liveFeeds < maxLiveFeeds else {
            throw .status(429, "Too many changes feeds of this connection are still ending; try again later")
        }
        subscribed = true
        pending = feed
    }

    /// Starts the feed `subscribe` accepted, now that its answer is queued: a task that runs `run` on it and then
    /// reports `ended` with the subscription's generation (pass it to `ended(generation:)` under the handler's
    /// lock). Nothing when there is no accepted feed or the connection is closing. The feed counts as live until
    /// `ended(generation:)`.
    public mutating func launch(
        run: @escaping @Sendable (Feed) async -> Void, ended: @escaping @Sendable (_ generation: Int) -> Void
    ) {
        guard let feed = pending else { return }
        pending = nil
        guard !closed else {
            subscribed = false
            return
        }
        liveFeeds += 1
        let generation = self.generation
        task = Task {
            await run(feed)
            ended(generation)
        }
    }

    /// A feed's task returned: it no longer counts, and its subscription (when still current) is over.
    public mutating func ended(generation ended: Int) {
        liveFeeds -= 1
        guard ended == generation else { return }
        subscribed = false
        task = nil
    }

    /// `unsubChanges`: the current subscription (running or accepted) is over; returns its task to cancel (it still
    /// counts until it returns).
    public mutating func unsubscribe() -> Task<Void, Never>? {
        defer {
            task = nil
            pending = nil
            subscribed = false
            generation += 1
        }
        return task
    }

    /// The connection closed: no more subscriptions; returns the running task to cancel.
    public mutating func close() -> Task<Void, Never>? {
        closed = true
        return task
    }

    /// Closes every collection index's subscription of a connection (`close` on each); returns the running tasks,
    /// for the caller to cancel once its lock is released.
    public static func closeAll(_ feeds: inout [Int?: BLIPSubscriptionState]) -> [Task<Void, Never>] {
        var tasks: [Task<Void, Never>] = []
        for key in Array(feeds.keys) {
            if let t = feeds[key]?.close() { tasks.append(t) }
        }
        return tasks
    }
}
