import SetteeClusterMap
import SetteeCore

// The cluster's decisions as one pure value: events in, directives out, time injected (in the style of
// `SWIM.Instance` in apple/swift-cluster-membership). `ClusterManager` (SetteeAdmin) only interprets the
// directives with HTTP calls and registry writes; `ClusterBrainSimulationTests` runs several brains against a
// simulated network. See docs/adr/0023-cluster-brain-and-epochs.md.
//
// Epochs (a term, like Raft's or a Paxos ballot):
//
//   candidate C                         every other active member N
//   ───────────                         ───────────────────────────
//   e = max(config.epoch, promised) + 1
//   promise(e, C) to itself ──────────▶ promiseRequested(e, C's stamp)
//                                         grants iff e > config.epoch, e > its promise (or = and same C), and
//                                         C's config is at least as new as its own; persists (e, C)
//   ◀── promiseAnswered(granted) ─────
//   granted by a strict majority of the active members (itself counted): C owns e and publishes (e, rev + 1);
//   otherwise nothing is published.
//
// Adoption (`EpochRules.adopts`): a config whose epoch is below the epoch a node promised is refused; otherwise
// the greater `(epoch, rev)` wins. Only the owner of an epoch publishes in it, so two configs never share one
// `(epoch, rev)` with different content, and a config published by a node cut off from the majority loses to
// anything the majority publishes after claiming a later epoch, whatever its `rev`.
//
// Fence before failover (`Timing.fenceLeadsFailover`): a member M that may still be running is failed over only
// once a majority of views has judged it down (each of those members silent with M for `unhealthyAfter`) for
// `failoverTimeout - unhealthyAfter` (an operator's failover and auto-failover alike, ADR 0034); M holds its
// actives back once it has had no contact with a majority for `failoverTimeout - fenceMargin`. M's fence counts
// only answers to its own heartbeats, dated when sent, so no later than the peer dated that contact (a request M
// merely received does not count: its answer may be lost, and the peer never dates it), so M's last contact with a
// majority is no later than the moment the majority's views start counting, and the fence, at most `tickInterval`
// late, is up `fenceMargin - tickInterval` before the earliest failover.

/// The two rules every node applies to configs and promises, whoever interprets them.
public enum EpochRules {
    /// Whether a node holding `current`, having promised `promise`, adopts `incoming`.
    ///
    /// 1. A config from an epoch below the promised one is refused: its publisher lost the epoch to a candidate
    ///    a majority promised a later one, and what it publishes now is not confirmed by that majority.
    /// 2. Otherwise the greater `(epoch, rev)` wins.
    /// 3. Equal revisions with different publishers only exist in configs written before epochs were claimed;
    ///    the publisher whose name sorts lower wins so such a cluster still converges.
    /// 4. A node never takes from a peer a config it published itself (`me`) but never adopted: a majority did not
    ///    accept it in time, and the operator was told the change failed.
    public static func adopts(
        incoming: ConfigStamp, current: ConfigStamp, promise: EpochPromise?, me: NodeID? = nil
    ) -> Bool {
        guard incoming.isWithinLimits else { return false }
        if let promise, incoming.epoch < promise.epoch { return false }
        if let me, incoming.publisher == me, incoming.revision > current.revision { return false }
        if incoming.revision != current.revision { return incoming.revision > current.revision }
        guard let theirs = incoming.publisher, let mine = current.publisher else { return false }
        return theirs.rawValue < mine.rawValue
    }

    /// Whether a node holding `current`, having promised `promise`, promises `epoch` to `candidate`, whose config
    /// is `candidateStamp`. The candidate must hold a config at least as new as the voter's (as Raft's vote
    /// rule): a config a majority accepted is then held by every candidate that can win, and carried forward.
    public static func grants(
        epoch: Int64, candidate: NodeID, candidateStamp: ConfigStamp, current: ConfigStamp, promise: EpochPromise?
    ) -> Bool {
        guard ConfigStamp.isValidEpoch(epoch), candidateStamp.isWithinLimits, epoch > current.epoch else {
            return false
        }
        if let promise {
            if epoch < promise.epoch { return false }
            if epoch == promise.epoch && promise.candidate != candidate { return false }
        }
        return candidateStamp.revision >= current.revision
    }

    /// The epoch a candidate holding `current` and having promised `promise` claims next: one above both; nil when
    /// that would pass `Limits.maxClusterEpoch` (the claim is refused, never an overflow).
    public static func nextEpoch(current: ConfigStamp, promise: EpochPromise?) -> Int64? {
        let highest = max(current.epoch, promise?.epoch ?? 0)
        guard highest < Limits.maxClusterEpoch else { return nil }
        return highest + 1
    }

    /// The revision after `rev`; nil when that would pass `Limits.maxConfigRevision` (the change is refused).
    public static func nextRevision(after rev: Int64) -> Int64? {
        guard rev < Limits.maxConfigRevision else { return nil }
        return rev + 1
    }

    /// Whether `granted` (voters that promised, the candidate included) is a strict majority of `members`.
    public static func isMajority(_ granted: Set<NodeID>, of members: [NodeID]) -> Bool {
        members.filter { granted.contains($0) }.count * 2 > members.count
    }
}

/// One node's view of the cluster, and every decision it takes about it.
public struct ClusterBrain: Sendable {
    /// The timing the rules rely on. `fenceLeadsFailover` must hold (`init` checks nothing: tests do).
    public struct Timing: Sendable, Equatable {
        /// Pause between two heartbeat rounds.
        public var heartbeatInterval: Duration = .seconds(1)
        /// Longest a heartbeat call may take before it counts as failed.
        public var callTimeout: Duration = .seconds(2)
        /// Silence after which a peer counts as unreachable (and leaves this node's view).
        public var unhealthyAfter: Duration = .seconds(4)
        /// How often `tick` runs (the fence is at most this late).
        public var tickInterval: Duration = .milliseconds(250)
        /// How much earlier than `failoverTimeout` a node without a majority fences itself.
        public var fenceMargin: Duration = .seconds(2)
        /// How long a promise, seqno or push round waits for answers.
        public var roundTimeout: Duration = .seconds(3)
        /// The auto-failover timeout (`/settings/autoFailover`), used with auto-failover off too: it is how long an
        /// operator's failover of an unreachable member waits.
        public var failoverTimeout: Duration = .seconds(120)
        /// The most one node's monotonic clock may run faster or slower than another's, as a fraction (a rate, not an
        /// offset: the lease compares only durations on one clock). NTP slews a clock by at most 500 ppm; 1 % leaves
        /// a wide margin for a VM's clock (`leaseEndsBeforeFailover`, ADR 0124).
        public var maxClockRateDrift: Double = 0.01

        public init() {}

        /// How long after its last clean contact with a majority (`ClusterBrain.lease`) a member may still serve as
        /// an active: the failover timeout, less the fence margin, less twice the drift over the timeout.
        public var leaseDuration: Duration {
            failoverTimeout - fenceMargin - failoverTimeout * (2 * maxClockRateDrift)
        }

        /// The lease inequality. A member's lease runs `leaseDuration` on its clock from the send time `c` of the
        /// heartbeats a majority answered; the majority fails it over no sooner than `failoverTimeout` after `c` on
        /// theirs (`fenceLeadsFailover`'s argument). With clock rates within `1 ± ρ` of real time the lease ends by
        /// real time `c + L / (1 − ρ)` and the failover comes no sooner than `c + T / (1 + ρ)`, so
        /// `L / (1 − ρ) < T / (1 + ρ)` must hold. Unlike the fence, no tick is involved: the lease is checked on
        /// every request against the clock, so a process paused past it refuses the requests waiting in its sockets.
        public var leaseEndsBeforeFailover: Bool {
            let rho = maxClockRateDrift
            guard (0..<1).contains(rho), leaseDuration > .zero else { return false }
            return leaseDuration / (1 - rho) < failoverTimeout / (1 + rho)
        }

        /// After how long without a majority a node fences itself.
        public var fenceAfter: Duration { failoverTimeout - fenceMargin }

        /// The rule that keeps split brain out, in terms of the last instant `c` a member had contact with a
        /// majority: it fences no later than `c + fenceAfter + tickInterval`; a majority's views judge it down no
        /// sooner than `c + unhealthyAfter`, and it is failed over no sooner than `failoverTimeout - unhealthyAfter`
        /// after that, at `c + failoverTimeout`. The fence must come first, and before the member's own view could
        /// lose the peers it still hears (`fenceAfter` positive).
        public var fenceLeadsFailover: Bool {
            fenceAfter > .zero && fenceAfter + tickInterval < failoverTimeout && unhealthyAfter < failoverTimeout
        }
    }

    /// The part of the cluster config the decisions need.
    public struct Config: Sendable, Equatable {
        public var stamp: ConfigStamp
        /// Active members, in member order.
        public var active: [NodeID]
        /// Placement per bucket name.
        public var placements: [String: BucketPlacement]

        public init(stamp: ConfigStamp, active: [NodeID], placements: [String: BucketPlacement]) {
            self.stamp = stamp
            self.active = active
            self.placements = placements
        }
    }

    public enum Event: Sendable, Equatable {
        /// Time passed; `now` is the time of every event.
        case tick
        /// A peer answered the heartbeat this node sent at `sent` with its config stamp, its promise and its view.
        /// Contact counts from `sent`: no later than the peer's own record of it.
        case heartbeatAnswered(from: NodeID, sent: Duration, stamp: ConfigStamp, promised: Int64, sees: Set<NodeID>)
        /// A peer did not answer; `refused` when its port actively refused the connection (its process is gone).
        case heartbeatFailed(from: NodeID, refused: Bool)
        /// A peer's heartbeat reached this node (contact, seen from this side).
        case heartbeatReceived(from: NodeID)
        /// The interpreter committed this config itself (a change in an epoch this brain claimed, a failover config
        /// it decided, joining or leaving a cluster) and loads it back, with the brain's own promise (ADR 0130).
        case configLoaded(Config, promise: EpochPromise?)
        /// A peer pushed a config (or this node pulled one).
        case configOffered(from: NodeID, Config)
        /// A candidate asks for a promise.
        case promiseRequested(from: NodeID, epoch: Int64, stamp: ConfigStamp)
        /// A voter answered this node's promise request.
        case promiseAnswered(from: NodeID, epoch: Int64, granted: Bool)
        /// A member answered (or not: nil) this node's request for the high seqnos of every bucket.
        case seqnosAnswered(from: NodeID, [String: [UInt64]]?)
        /// A member answered this node's push of `stamp`.
        case pushAnswered(from: NodeID, stamp: ConfigStamp, accepted: Bool)
        /// A member that claimed `epoch` to fail this node over asks it to stop serving first (`FenceAnswer`).
        case fenceRequested(from: NodeID, epoch: Int64)
        /// The victim of this node's failover answered (or not) its fence request for `epoch`.
        case fenceAnswered(from: NodeID, epoch: Int64, FenceAnswer)
        /// An operator asked for a hard failover (or the interpreter, after `autoFailoverDue`: `automatic`).
        case failoverRequested(NodeID, allowUnsafe: Bool, automatic: Bool)
        /// Auto-failover settings changed.
        case settingsChanged(autoFailover: Bool, failoverTimeout: Duration)
        /// The interpreter asks to claim an epoch for a config change other than a failover (a rebalance step, a
        /// hand-over, adding or removing a member): answered with `changeClaimed` or `changeRefused` carrying `id`.
        case changeRequested(id: UInt64)
        /// The interpreter is about to commit a change in `claim` (an epoch this brain claimed for it, from
        /// `changeClaimed`), with the store's order held: answered with `commitChange` or `changeStale`
        /// (`ClusterBrain+ChangeClaim.swift`).
        case changeCommitting(EpochClaim)
        /// The interpreter starts rebalancing a bucket on this node (`ClusterBrain+Rebalance.swift`).
        case rebalanceStarted(RebalanceRun)
        /// What came back for the running rebalance's last directive, a tick, or a stop request.
        case rebalance(RebalanceRun.Event)
    }

    /// What came back from a failover's fence request to its victim.
    public enum FenceAnswer: Sendable, Equatable {
        /// It holds its actives back (or serves nothing), and will until it holds a config of the epoch.
        case fenced
        /// It answered without fencing (it holds a config of that epoch or later, or is not a member there).
        case notFenced
        /// Its port refused the connection: its process is gone, and a restart comes up fenced behind the promise.
        case gone
        /// No answer in time (paused, cut off, or the message was lost).
        case unanswered
    }

    /// Why a failover was not done.
    public enum Refusal: Error, Sendable, Equatable {
        case unknownNode
        case lastActive
        case busy
        case noQuorum(String)
        /// No surviving copy can be shown to hold every majority-acknowledged write of these vBuckets.
        case unsafe([String: [VBucketID]])
        /// The member may still be serving (reached by a majority, or not silent long enough to have fenced).
        case mayStillServe(String)
        /// Too few members promised the new epoch.
        case epochRefused(Int64)
        /// Too few members accepted the failover config in time (some may have; it may still spread).
        case notAccepted
        /// The next epoch or revision would pass `Limits.maxClusterEpoch` / `maxConfigRevision`.
        case limitReached(String)
    }

    public enum Directive: Sendable, Equatable {
        /// Persist this node's promise before answering anything else.
        case persistPromise(EpochPromise)
        case answerPromise(to: NodeID, epoch: Int64, granted: Bool)
        /// Persist and apply the config (the adoption rule already passed).
        case adopt(Config)
        /// Fetch the config of a peer that holds a newer one (then feed it back as `configOffered`).
        case pull(from: NodeID)
        case requestPromises(epoch: Int64, stamp: ConfigStamp, from: [NodeID])
        case requestSeqnos(from: [NodeID])
        /// Persist `config` (`failed` becomes inactiveFailed) as this node's own (a majority accepted it), then
        /// push it to `to`.
        case publish(Config, failed: NodeID?, to: [NodeID])
        /// Push `config` (`failed` inactiveFailed) to `to` without adopting it here yet, feeding back each answer
        /// (`pushAnswered`): the victim first, then the rest until a majority accepted.
        case push(Config, failed: NodeID?, to: [NodeID])
        /// Ask the victim of this node's failover to hold its actives back for `epoch`, before its survivors'
        /// seqnos are sampled (answered with `fenceAnswered`).
        case requestFence(of: NodeID, epoch: Int64)
        /// Answer a fence request; any `fence` directive before it is carried out first.
        case answerFence(to: NodeID, epoch: Int64, fenced: Bool)
        /// Hold this node's active vBuckets back, with the reason operators see; `unfence` lifts it.
        case fence(String)
        case unfence
        /// Auto-failover judged `victim` down for the timeout: the interpreter stops any rebalance and feeds
        /// `failoverRequested(victim, automatic: true)`.
        case autoFailoverDue(NodeID)
        case failoverDone(NodeID, automatic: Bool)
        case failoverRefused(NodeID, Refusal)
        /// A majority promised `epoch` to this node for change `id`: the interpreter publishes the change at
        /// `(epoch, rev + 1)`, provided it still holds that promise and no config of `epoch` or later arrived.
        case changeClaimed(id: UInt64, epoch: Int64)
        /// Change `id` must not be published (no quorum, busy, or too few promises).
        case changeRefused(id: UInt64, Refusal)
        /// The change may be committed in `claim` now: as the config `(claim.epoch, rev + 1)` published by its
        /// claimant. The answer to `changeCommitting`.
        case commitChange(EpochClaim)
        /// The change must not be committed in `claim` (`EpochClaim.staleness` says why, for the operator): nothing
        /// of it may be stored. The answer to `changeCommitting`.
        case changeStale(EpochClaim, reason: String)
        /// The running rebalance's next step, for the interpreter that fed its event.
        case rebalance(RebalanceRun.Directive)
    }

    struct Peer: Sendable {
        var stamp: ConfigStamp
        var promised: Int64
        var sees: Set<NodeID>
        /// When the heartbeat this answered was sent.
        var at: Duration
    }

    enum Phase: Sendable, Equatable {
        /// Waiting until the victim can be shown to have fenced itself (or to be gone).
        case waitingForFence(until: Duration)
        case claiming(epoch: Int64, granted: Set<NodeID>, answered: Set<NodeID>)
        /// The epoch is claimed; the victim is asked (again each `heartbeatInterval`) to stop serving, until it
        /// confirms, its process is gone, or it must have fenced itself. Only then are seqnos sampled.
        case fencingVictim(askedAt: Duration)
        case askingSeqnos(asked: Set<NodeID>, reports: [NodeID: [String: [UInt64]]])
        /// Pushed to every other member (the victim too); adopted here once a majority of the electorate accepted.
        case pushing(Config, base: ConfigStamp, acks: Set<NodeID>)
    }

    struct Pending: Sendable, Equatable {
        var victim: NodeID
        var allowUnsafe: Bool
        var automatic: Bool
        var phase: Phase
        var phaseStarted: Duration
        /// Set once this failover claimed an epoch for itself, with the config it claimed it over: a failover whose
        /// node meanwhile holds another config, or promised a later epoch, is refused (`claimLost`).
        var epoch: Int64?
        var base: ConfigStamp?
        /// Set once the victim was asked to fence: a refusal from then on, before anything was pushed, publishes
        /// the config unchanged at the claimed epoch so the victim's hold ends (`refuse`).
        var fenceAsked = false
        /// Who must promise the epoch: the active members, or the survivors when the failover is forced (the
        /// operator's allowUnsafe, or two members where no majority survives one loss).
        var electorate: [NodeID]
    }

    public let me: NodeID
    public private(set) var timing: Timing
    public private(set) var autoFailover: Bool
    public internal(set) var config: Config
    public internal(set) var promise: EpochPromise?
    /// The reason this node holds its actives back, or nil.
    public internal(set) var fence: String?
    /// Since when this node is fenced: only heartbeat answers sent after it may lift the fence.
    var fencedAt: Duration?
    /// The epoch of a failover of this node whose orchestrator asked it to fence (`fenceRequested`): the fence stays
    /// until this node holds a config of that epoch or later, or a fresh majority shows nobody promised it (a stray
    /// request). Not kept over a restart, where the majority's promises of that epoch hold the fence instead.
    var failoverHold: Int64?
    /// Since when this node or a peer it reaches has promised an epoch past this node's config (`repairStuckEpoch`).
    var stuckSince: Duration?
    /// A config of a new epoch adopted from its publisher, not yet seen confirmed by a majority of its members,
    /// and since when: its publisher may not have got a majority to accept it, and a majority that never saw it
    /// may still serve by the old one, so this node serves by it only once confirmed.
    var unconfirmed: (epoch: Int64, since: Duration)?
    public private(set) var now: Duration
    let startedAt: Duration
    var contact: [NodeID: Duration] = [:]
    /// Per peer, when the last heartbeat it answered was sent: the contact this node's fence counts
    /// (`lastMajorityContact`). A heartbeat received from a peer is contact for this node's view, but not for its
    /// fence: the peer may never get the answer, and then never dates that contact on its side (the simulation found
    /// a victim that a healed instant of partition kept serving past its failover).
    var answeredAt: [NodeID: Duration] = [:]
    /// Per peer, when the last heartbeat it answered showing nothing newer than this node holds (no config this node
    /// would adopt, no promise past its config's epoch) was sent: the contact that renews the lease (`lease`).
    var leaseContactAt: [NodeID: Duration] = [:]
    var refused: Set<NodeID> = []
    var peers: [NodeID: Peer] = [:]
    var detector = FailureDetector()
    var pending: Pending?
    var lastAutoRequest: Duration?
    /// The epoch claim of a config change other than a failover, while its promises are counted
    /// (`ClusterBrain+ChangeClaim.swift`).
    var change: ChangeClaim?
    /// The rebalance of one bucket this node runs as orchestrator, or nil (`ClusterBrain+Rebalance.swift`).
    public internal(set) var rebalance: RebalanceRun?

    /// A brain that starts at `now` with the persisted `config` and `promise`. It starts fenced when the config
    /// has three or more active members including this one: the config may be stale (it may have been failed over
    /// while down), so it serves only once it reached a majority and holds no older config than they do.
    public init(
        me: NodeID, config: Config, promise: EpochPromise?, timing: Timing, autoFailover: Bool, now: Duration
    ) {
        self.me = me
        self.config = config
        self.promise = promise
        self.timing = timing
        self.autoFailover = autoFailover
        self.now = now
        self.startedAt = now
        if Self.fencing(config.active, me: me) {
            fence = "Starting: waiting to reach a majority of the cluster."
            fencedAt = now
        }
    }

    static func fencing(_ active: [NodeID], me: NodeID) -> Bool { active.count >= 3 && active.contains(me) }

    // MARK: Derived

    /// Peers heard from within `unhealthyAfter` (this node's view).
    public var reachable: Set<NodeID> {
        Set(contact.filter { $0.key != me && now - $0.value < timing.unhealthyAfter }.keys)
    }

    /// Whether this node ever had contact with `node` since it started.
    public func hasContact(_ node: NodeID) -> Bool { contact[node] != nil }

    /// Whether this node reaches a strict majority of the active members (itself counted).
    public var hasQuorum: Bool {
        config.active.count <= 1
            || FailureDetector.hasQuorum(members: config.active, me: me, reachable: reachable)
    }

    /// The last instant this node had contact with a strict majority of the active members (itself counted), as
    /// its fence counts it: answers to its own heartbeats, dated when sent (`answeredAt`). Nil when it never had.
    public var lastMajorityContact: Duration? {
        let others = config.active.filter { $0 != me }
        let needed = config.active.count / 2  // others needed besides itself for a strict majority
        if needed == 0 { return now }
        let times = others.compactMap { answeredAt[$0] }.sorted(by: >)
        return times.count >= needed ? times[needed - 1] : nil
    }

    /// The members the fence counts as in contact now (itself, and each peer that answered a heartbeat sent within
    /// `fenceAfter`): what its log line reports. Not the 4-second view (`reachable`), which heartbeats merely
    /// received keep full: a node resumed from a pause, or whose answers are lost, hears every peer and still has
    /// no answered contact (it logged "reaches 5 of 5 active cluster members, not a majority").
    var answeredWithinFenceAfter: Int {
        config.active.filter { p in
            p == me || (answeredAt[p].map { now - $0 < timing.fenceAfter } ?? false)
        }.count
    }

    /// Whether this node owns the epoch of its config (it published in it and promised nothing later).
    public var ownsEpoch: Bool {
        config.stamp.publisher == me && (promise?.epoch ?? 0) <= config.stamp.epoch
    }

    /// The member that orders changes now: the publisher of the config while it is reached (or is this node),
    /// otherwise the reached active member whose name sorts lowest (all of them while none is reached yet).
    public var orchestrator: NodeID? {
        let heard = reachable.union([me])
        if let p = config.stamp.publisher, config.active.contains(p), heard.contains(p) { return p }
        let live = config.active.filter { heard.contains($0) }
        let pool = live.isEmpty || (live == [me] && now - startedAt < timing.unhealthyAfter) ? config.active : live
        return pool.min { $0.rawValue < $1.rawValue }
    }

    /// Members a majority of views has judged down, in member order.
    public var down: [NodeID] { FailureDetector.down(members: config.active, views: views) }

    var views: [NodeID: Set<NodeID>] {
        var v: [NodeID: Set<NodeID>] = [me: reachable]
        for p in reachable { if let sees = peers[p]?.sees { v[p] = sees } }
        return v
    }

    /// When the failover of `victim` is allowed without allowUnsafe, or nil while a majority still reaches it.
    /// A member whose last heartbeat was refused (its process is gone) or that this node reaches (the failover is
    /// pushed to it first) may go now.
    func failoverAllowedAt(_ victim: NodeID, trustReach: Bool = true) -> Duration? {
        if refused.contains(victim) || (trustReach && reachable.contains(victim)) { return now }
        guard let since = detector.downSince[victim] else { return nil }
        return since + timing.failoverTimeout - timing.unhealthyAfter
    }

    // MARK: Events

    public mutating func handle(_ event: Event, now: Duration) -> [Directive] {
        if now > self.now { self.now = now }
        switch event {
        case .tick:
            return tick()
        case .heartbeatAnswered(let from, let sent, let stamp, let promised, let sees):
            contact[from] = max(contact[from] ?? sent, sent)
            answeredAt[from] = max(answeredAt[from] ?? sent, sent)
            noteLeaseContact(from: from, sent: sent, stamp: stamp, promised: promised)
            refused.remove(from)
            peers[from] = Peer(stamp: stamp, promised: promised, sees: sees, at: sent)
            if EpochRules.adopts(incoming: stamp, current: config.stamp, promise: promise, me: me) {
                return [.pull(from: from)]
            }
            return []
        case .heartbeatFailed(let from, let wasRefused):
            if wasRefused { refused.insert(from) } else { refused.remove(from) }
            return []
        case .heartbeatReceived(let from):
            contact[from] = self.now
            refused.remove(from)
            return []
        case .configLoaded(let c, let p):
            noteEpochChange(to: c)
            config = c
            promise = p
            return holdIfUnconfirmed()
        case .configOffered(_, let c):
            guard EpochRules.adopts(incoming: c.stamp, current: config.stamp, promise: promise, me: me) else {
                return []
            }
            noteEpochChange(to: c)
            config = c
            // The hold goes up before the config is applied.
            let hold = holdIfUnconfirmed()
            if !hold.isEmpty { return hold + [.adopt(c)] }
            if let p = promise, p.epoch < c.stamp.epoch, let owner = c.stamp.publisher {
                promise = EpochPromise(epoch: c.stamp.epoch, candidate: owner)
            }
            return [.adopt(c)]
        case .promiseRequested(let from, let epoch, let stamp):
            let granted = EpochRules.grants(
                epoch: epoch, candidate: from, candidateStamp: stamp, current: config.stamp, promise: promise)
            var out: [Directive] = []
            if granted {
                promise = EpochPromise(epoch: epoch, candidate: from)
                out.append(.persistPromise(EpochPromise(epoch: epoch, candidate: from)))
            }
            out.append(.answerPromise(to: from, epoch: epoch, granted: granted))
            return out
        case .promiseAnswered(let from, let epoch, let granted):
            return promiseAnswered(from: from, epoch: epoch, granted: granted)
        case .seqnosAnswered(let from, let rows):
            return seqnosAnswered(from: from, rows)
        case .pushAnswered(let from, let stamp, let accepted):
            return pushAnswered(from: from, stamp: stamp, accepted: accepted)
        case .fenceRequested(let from, let epoch):
            return fenceRequested(from: from, epoch: epoch)
        case .fenceAnswered(let from, let epoch, let answer):
            return fenceAnswered(from: from, epoch: epoch, answer)
        case .failoverRequested(let victim, let allowUnsafe, let automatic):
            return startFailover(victim, allowUnsafe: allowUnsafe, automatic: automatic)
        case .settingsChanged(let on, let timeout):
            autoFailover = on
            timing.failoverTimeout = timeout
            return []
        case .changeRequested(let id):
            return startChange(id)
        case .changeCommitting(let claim):
            return changeCommitting(claim)
        case .rebalanceStarted(let run):
            return startRebalance(run)
        case .rebalance(let e):
            return routeRebalance(e)
        }
    }

    mutating func tick() -> [Directive] {
        var out: [Directive] = []
        // A member is judged down by views silent with it for `unhealthyAfter` already: auto-failover waits the rest
        // of the timeout, so it comes `failoverTimeout` after the last contact (as an operator's failover may), not
        // `unhealthyAfter` later. The fence still leads it (`Timing.fenceLeadsFailover`).
        let verdict = detector.round(
            now: now, members: config.active, me: me, views: views,
            timeout: timing.failoverTimeout - timing.unhealthyAfter)
        out += fenceRound()
        out += advancePending()
        out += advanceChange()
        out += repairStuckEpoch()
        if autoFailover, pending == nil, orchestrator == me, verdict.hasQuorum, let victim = verdict.failOver,
            lastAutoRequest.map({ now - $0 >= timing.roundTimeout }) ?? true
        {
            lastAutoRequest = now
            out.append(.autoFailoverDue(victim))
        }
        return out
    }

    /// Fences when this node has had no majority for `fenceAfter`; lifts the fence once a majority answered
    /// heartbeats sent after the fence began (contact counted by the old, 4 s view could lift a fence it just set)
    /// and none of those answers names a config this node would adopt (it pulls that one first).
    mutating func fenceRound() -> [Directive] {
        if let u = unconfirmed {
            // A peer confirms the epoch when it holds it, or a later one, and nothing this node would adopt: one that
            // holds a newer config (say a later epoch that restores a member this one failed over) confirms that
            // config, not this one, and this node pulls it first (the simulation found a node serving by a failover
            // a later epoch had undone).
            let confirming = config.active.filter { p in
                p != me
                    && (peers[p].map {
                        $0.at >= u.since && $0.stamp.epoch >= u.epoch
                            && !EpochRules.adopts(incoming: $0.stamp, current: config.stamp, promise: promise, me: me)
                    } ?? false)
            }
            if EpochRules.isMajority(Set(confirming + [me]), of: config.active) { unconfirmed = nil }
        }
        if let e = failoverHold, config.stamp.epoch >= e || !config.active.contains(me) { failoverHold = nil }
        guard config.active.contains(me), config.active.count >= 2,
            Self.fencing(config.active, me: me) || unconfirmed != nil
        else {
            if fence != nil {
                fence = nil
                fencedAt = nil
                return [.unfence]
            }
            return []
        }
        if fence == nil, unconfirmed != nil { return holdIfUnconfirmed() }
        let since = lastMajorityContact
        let cutOff = since.map { now - $0 >= timing.fenceAfter } ?? (now - startedAt >= timing.fenceAfter)
        if fence == nil {
            guard cutOff else { return [] }
            let reason =
                "No quorum: \(me) has heard back from \(answeredWithinFenceAfter) of \(config.active.count) active "
                + "cluster members (itself counted), not a majority, within \(timing.fenceAfter) (failover timeout "
                + "\(timing.failoverTimeout) less \(timing.fenceMargin)): active vBuckets are held back "
                + "(NOT_MY_VBUCKET), the majority may fail this node over."
            fence = reason
            fencedAt = now
            return [.fence(reason)]
        }
        let fenceStart = fencedAt ?? now
        let fresh = config.active.filter { p in p != me && (peers[p].map { $0.at >= fenceStart } ?? false) }
        guard EpochRules.isMajority(Set(fresh + [me]), of: config.active) else { return [] }
        // Behind: a peer holds a config this node would adopt, or it or this node promised a later epoch than this
        // node's config (a failover, maybe of this node, is under way: a majority promised its epoch before the
        // victim was asked to fence, and any majority of fresh answers counted with this node includes one of them).
        let behind =
            (promise?.epoch ?? 0) > config.stamp.epoch
            || fresh.contains { p in
                peers[p].map {
                    EpochRules.adopts(incoming: $0.stamp, current: config.stamp, promise: promise, me: me)
                        || $0.promised > config.stamp.epoch
                } ?? true
            }
        // A victim's hold lasts while a promise of its failover's epoch shows: a majority promised it before the
        // victim was asked, so a real failover always shows one here; a request nobody promised for (a stray or
        // forged call) is over at the first fresh majority.
        let held = failoverHold.map { e in
            (promise?.epoch ?? 0) >= e || fresh.contains { (peers[$0]?.promised ?? 0) >= e }
        }
        guard !behind, unconfirmed == nil, held != true else { return [] }
        failoverHold = nil
        fence = nil
        fencedAt = nil
        return [.unfence]
    }

    /// Fences this node at once while its config is unconfirmed.
    mutating func holdIfUnconfirmed() -> [Directive] {
        guard fence == nil, let u = unconfirmed else { return [] }
        let reason =
            "Confirming cluster epoch \(u.epoch): active vBuckets are held back (NOT_MY_VBUCKET) until a majority "
            + "of the members is seen holding it."
        fence = reason
        fencedAt = now
        return [.fence(reason)]
    }

    /// Notes a config of a later epoch published by another member as unconfirmed (`unconfirmed`).
    /// Only a config that fails a member over (some member active here is not active there) is held: a change
    /// that claimed its epoch without failing anyone over (a rebalance step, a hand-over, a new member) moves an
    /// active only from a copy that already serves nothing (pending after an acknowledged takeover, or held after
    /// an unclean restart), so serving by it before it is confirmed cannot make two actives (ADR 0034).
    mutating func noteEpochChange(to c: Config) {
        guard c.stamp.epoch > config.stamp.epoch, c.active.contains(me), c.active.count >= 2,
            c.stamp.publisher != me, config.active.contains(where: { !c.active.contains($0) })
        else { return }
        unconfirmed = (c.stamp.epoch, now)
    }

    // MARK: Failover

    mutating func startFailover(_ victim: NodeID, allowUnsafe: Bool, automatic: Bool) -> [Directive] {
        if pending != nil || change != nil { return [.failoverRefused(victim, .busy)] }
        guard config.active.contains(victim) else { return [.failoverRefused(victim, .unknownNode)] }
        guard config.active.count > 1 else { return [.failoverRefused(victim, .lastActive)] }
        // Two members can never keep a majority after losing one: the operator's request is the decision.
        if !allowUnsafe, config.active.count > 2, !hasQuorum {
            let seen = config.active.filter { $0 == me || reachable.contains($0) }.count
            return [
                .failoverRefused(
                    victim,
                    .noQuorum(
                        "No quorum: \(me) reaches \(seen) of \(config.active.count) active cluster members, not a "
                            + "majority; it makes no cluster changes until it does."))
            ]
        }
        let forced = allowUnsafe || config.active.count <= 2
        // Otherwise it waits (each tick re-judges) until the victim must have fenced itself.
        let until = now
        pending = Pending(
            victim: victim, allowUnsafe: allowUnsafe, automatic: automatic, phase: .waitingForFence(until: until),
            phaseStarted: now, electorate: forced ? config.active.filter { $0 != victim } : config.active)
        return advancePending()
    }

    /// Moves the pending failover on as far as time and answers allow.
    mutating func advancePending() -> [Directive] {
        guard var p = pending else { return [] }
        if claimLost(p) { return refuse(p, .busy) }
        switch p.phase {
        case .waitingForFence(let until):
            if !p.allowUnsafe, config.active.count > 2 {
                // Re-judged each tick: not yet judged down by a majority of views (just cut off, or cut off from
                // this node only), or not yet for long enough.
                let at = failoverAllowedAt(p.victim)
                guard let at, now >= max(at, until) else {
                    // An operator waits at most the failover timeout plus a round; auto-failover only asks when due.
                    if now - p.phaseStarted > timing.failoverTimeout + timing.roundTimeout {
                        pending = nil
                        let why =
                            at == nil
                            ? "\(p.victim) is still reached by a majority of the cluster: failing it over now would "
                                + "leave it serving alongside the copies promoted in its place."
                            : "\(p.victim) did not fence in time."
                        return [.failoverRefused(p.victim, .mayStillServe(why))]
                    }
                    return []
                }
            }
            return claim(&p)
        case .claiming:
            guard now - p.phaseStarted >= timing.roundTimeout else { return [] }
            pending = nil
            return [.failoverRefused(p.victim, .epochRefused(p.epoch ?? 0))]
        case .fencingVictim(let askedAt):
            if victimMustHaveFenced(p.victim) { return askSeqnos(&p) }
            if now - p.phaseStarted > victimFenceLimit {
                return refuse(
                    p,
                    .mayStillServe(
                        "\(p.victim) neither confirmed that it stopped serving nor was out of reach long enough to "
                            + "have fenced itself."))
            }
            guard now - askedAt >= timing.heartbeatInterval, let epoch = p.epoch else { return [] }
            p.phase = .fencingVictim(askedAt: now)
            pending = p
            return [.requestFence(of: p.victim, epoch: epoch)]
        case .askingSeqnos:
            guard now - p.phaseStarted >= timing.roundTimeout else { return [] }
            return decide(&p)
        case .pushing:
            guard now - p.phaseStarted >= timing.roundTimeout else { return [] }
            pending = nil
            return [.failoverRefused(p.victim, .notAccepted)]
        }
    }

    /// Pushes the failover config to every other member, if nothing changed since it was decided; it is adopted
    /// here only once a majority of the electorate accepted it (`pushAnswered`), so a config the majority never
    /// saw never governs what this node serves.
    mutating func startPushing(_ c: Config, base: ConfigStamp, acks: Set<NodeID>, _ p: Pending) -> [Directive] {
        // The config may already be here: pulled from a peer that accepted it.
        guard config.stamp == base || config.stamp == c.stamp else { return refuse(p, .busy) }
        var q = p
        q.phase = .pushing(c, base: base, acks: acks.union([me]))
        q.phaseStarted = now
        pending = q
        if EpochRules.isMajority(acks.union([me]), of: q.electorate) { return commit(c, q) }
        let targets = (config.active + [p.victim]).filter { $0 != me && !acks.contains($0) }
        return [.push(c, failed: p.victim, to: Array(Set(targets)).sorted { $0.rawValue < $1.rawValue })]
    }

    /// Adopts the failover config a majority accepted, and tells everyone.
    mutating func commit(_ c: Config, _ p: Pending) -> [Directive] {
        pending = nil
        // Promised a later epoch to another candidate meanwhile (the push round lasts): that candidate may publish
        // over a config older than this one, and a majority of its voters refuses this one. Not adopted here; it
        // may still spread, and loses to the later epoch wherever it meets it.
        guard !promisedPast(c.stamp.epoch) else {
            return [.failoverRefused(p.victim, .notAccepted)]
        }
        config = c
        let targets = (c.active + [p.victim]).filter { $0 != me }
        return [.publish(c, failed: p.victim, to: targets), .failoverDone(p.victim, automatic: p.automatic)]
    }

    /// Claims a new epoch for the failover: promises it to itself, asks the others.
    mutating func claim(_ p: inout Pending) -> [Directive] {
        guard let epoch = EpochRules.nextEpoch(current: config.stamp, promise: promise) else {
            pending = nil
            return [.failoverRefused(p.victim, Self.epochLimitReached(config.stamp, promise))]
        }
        let mine = EpochPromise(epoch: epoch, candidate: me)
        promise = mine
        p.epoch = epoch
        p.base = config.stamp
        p.phase = .claiming(epoch: epoch, granted: [me], answered: [me])
        p.phaseStarted = now
        pending = p
        let voters = config.active.filter { $0 != me }
        var out: [Directive] = [.persistPromise(mine)]
        if EpochRules.isMajority([me], of: p.electorate) {
            return out + stopVictim(&p)
        }
        out.append(.requestPromises(epoch: epoch, stamp: config.stamp, from: voters.filter(p.electorate.contains)))
        return out
    }

    /// Why no epoch can be claimed after `current` and `promise`.
    static func epochLimitReached(_ current: ConfigStamp, _ promise: EpochPromise?) -> Refusal {
        .limitReached(
            "cluster epoch \(max(current.epoch, promise?.epoch ?? 0)) is at \(Limits.maxClusterEpoch): no later one "
                + "can be claimed")
    }

    mutating func promiseAnswered(from: NodeID, epoch: Int64, granted: Bool) -> [Directive] {
        if let c = change, c.epoch == epoch { return changePromiseAnswered(from: from, granted: granted) }
        guard var p = pending, case .claiming(let e, var yes, var answered) = p.phase, e == epoch else { return [] }
        if from == me && !granted {
            // This node's own promise could not be persisted (it promised the epoch to another meanwhile).
            pending = nil
            return [.failoverRefused(p.victim, .epochRefused(e))]
        }
        answered.insert(from)
        if granted { yes.insert(from) }
        p.phase = .claiming(epoch: e, granted: yes, answered: answered)
        pending = p
        if EpochRules.isMajority(yes, of: p.electorate) { return stopVictim(&p) }
        let undecided = p.electorate.filter { !answered.contains($0) }
        if !EpochRules.isMajority(yes.union(undecided), of: p.electorate) {
            pending = nil
            return [.failoverRefused(p.victim, .epochRefused(e))]
        }
        return []
    }

    mutating func askSeqnos(_ p: inout Pending) -> [Directive] {
        let survivors = config.active.filter { $0 != p.victim }
        p.phase = .askingSeqnos(asked: Set(survivors), reports: [:])
        p.phaseStarted = now
        pending = p
        return [.requestSeqnos(from: survivors)]
    }

    mutating func seqnosAnswered(from: NodeID, _ rows: [String: [UInt64]]?) -> [Directive] {
        guard var p = pending, case .askingSeqnos(var asked, var reports) = p.phase, asked.contains(from) else {
            return []
        }
        asked.remove(from)
        if let rows { reports[from] = rows }
        p.phase = .askingSeqnos(asked: asked, reports: reports)
        pending = p
        return asked.isEmpty ? decide(&p) : []
    }

    /// Decides every bucket's failover from the seqnos reported (`Failover.decide`), then publishes at the
    /// claimed epoch, to the victim first when it is reachable.
    mutating func decide(_ p: inout Pending) -> [Directive] {
        if claimLost(p) { return refuse(p, .busy) }
        guard case .askingSeqnos(_, let reports) = p.phase, let epoch = p.epoch,
            let index = config.active.firstIndex(of: p.victim)
        else {
            pending = nil
            return []
        }
        var placements = config.placements
        var unsafe: [String: [VBucketID]] = [:]
        let names = config.active
        for (bucket, placement) in config.placements {
            let replicas = placement.chains.first.map { $0.count - 1 } ?? 0
            let map = placement.indexMap(over: names, numReplicas: replicas)
            var byIndex: [Int: [UInt64]] = [:]
            for (i, name) in names.enumerated() { if let row = reports[name]?[bucket] { byIndex[i] = row } }
            let d = Failover.decide(map: map, failed: [index], nodeCount: names.count, seqnos: CopySeqnos(byIndex))
            if !d.isSafe { unsafe[bucket] = d.unsafe }
            placements[bucket] = BucketPlacement.from(d.map, nodes: names)
        }
        if !unsafe.isEmpty && !p.allowUnsafe { return refuse(p, .unsafe(unsafe)) }
        guard let rev = EpochRules.nextRevision(after: config.stamp.rev) else {
            return refuse(
                p, .limitReached("config revision \(config.stamp.rev) is at \(Limits.maxConfigRevision)"))
        }
        // Placements keep the victim's name out of every chain; members drop it from the active list.
        let next = Config(
            stamp: ConfigStamp(epoch: epoch, rev: rev, publisher: me),
            active: config.active.filter { $0 != p.victim }, placements: placements)
        return startPushing(next, base: config.stamp, acks: [], p)
    }

    mutating func pushAnswered(from: NodeID, stamp: ConfigStamp, accepted: Bool) -> [Directive] {
        guard accepted, let p = pending else { return [] }
        switch p.phase {
        case .pushing(let c, let base, var acks) where stamp == c.stamp:
            acks.insert(from)
            var q = p
            q.phase = .pushing(c, base: base, acks: acks)
            pending = q
            return EpochRules.isMajority(acks, of: q.electorate) ? commit(c, q) : []
        default:
            return []
        }
    }
}
