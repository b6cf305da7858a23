import Foundation
import Logging
import NIOHTTP1
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteePeerHTTP
import SetteeRegistry
import SetteeStorage
import Synchronization

/// The interpreter of `ClusterBrain`: health, the orchestrator, quorum, self-fencing, epoch claims, manual and
/// automatic failover, adoption of peers' configs and promises to candidates are the brain's decisions; this file
/// feeds it what the network says and carries out its directives (HTTP calls to peers, the fence); the brain's state
/// reaches the registry through `ClusterManager+Store.swift`, which only stores it. Time is the manager's monotonic
/// clock since start. See docs/adr/0023-cluster-brain-and-epochs.md and docs/adr/0130.
///
/// ```
///   heartbeat round (1 s) ──heartbeatAnswered/Failed──▶ ┌────────────┐ ──pull──────────────▶ GET config, adopt
///   GET /heartbeat from a peer ──heartbeatReceived────▶ │ ClusterBrain│ ──fence/unfence─────▶ registry.setFence
///   tick (250 ms) ─────────────────────────────────────▶ │  (pure)    │ ──requestPromises───▶ POST /promise
///   /controller/failOver ──failoverRequested──────────▶ └────────────┘ ──requestSeqnos─────▶ GET /seqnos
///                        ◀──failoverDone/Refused───────               ──push/publish──────▶ POST /config
/// ```
///
/// Auto-failover (off by default) fails a member over when all of these hold (the brain's `tick`):
/// 1. auto-failover is enabled and fewer than `maxCount` auto-failovers happened since the last reset;
/// 2. this node is the orchestrator and reaches a strict majority of the active members (itself included);
/// 3. a strict majority of the other members cannot reach the member (one cut link is not a dead node), it has
///    been so for the failover timeout, and it is the only such member (`FailureDetector`);
/// 4. a majority promised this node a new epoch, and the failover is safe (`Failover.decide`).
extension ClusterManager {
    /// The brain's clock: time since this manager started.
    var brainNow: Duration { ContinuousClock.now - startedAt }

    /// The part of a stored config the brain decides on (loaded at start, after this node's own writes, and from a
    /// peer's document offered to it).
    static func brainConfig(_ s: NodeRegistry.ClusterSnapshot) -> ClusterBrain.Config {
        var placements: [String: BucketPlacement] = [:]
        for (settings, placement) in s.buckets { placements[settings.name] = placement }
        return ClusterBrain.Config(
            stamp: ConfigStamp(epoch: s.revision.epoch, rev: s.revision.rev, publisher: s.orchestrator),
            active: s.members.filter { $0.membership == .active }.map(\.id), placements: placements)
    }

    static func brainTiming(_ settings: AutoFailoverSettings) -> ClusterBrain.Timing {
        var t = ClusterBrain.Timing()
        t.heartbeatInterval = heartbeatInterval
        t.callTimeout = heartbeatCallTimeout
        t.unhealthyAfter = unhealthyAfter
        t.tickInterval = tickInterval
        t.failoverTimeout = .seconds(settings.timeout)
        return t
    }

    /// Feeds one event to the brain and hands its lease to the KV port. The brain holds the cluster state it decides
    /// on (config, promise, settings); it is loaded from the registry only at start and after a write this node made
    /// (`ClusterManager+Store.swift`), never mirrored before an event (ADR 0130).
    @discardableResult
    func feed(_ event: ClusterBrain.Event) -> [ClusterBrain.Directive] {
        let now = brainNow
        return brain.withLock { b in
            let out = b.handle(event, now: now)
            applyLease(b.lease)
            return out
        }
    }

    /// Hands the brain's lease to the KV port's check (`NodeRegistry.servingLease`, ADR 0124), on the manager's clock.
    /// Called under the brain's lock, so the check never sees an older lease after a newer one.
    func applyLease(_ lease: ClusterBrain.Lease) {
        switch lease {
        case .none: registry.servingLease.revoke()
        case .unbounded: registry.servingLease.grantUnbounded()
        case .until(let end): registry.servingLease.grant(until: startedAt + end)
        }
    }

    /// Feeds an event and carries out what it leads to.
    func feedAndExecute(_ event: ClusterBrain.Event) async {
        await execute(feed(event))
    }

    /// Carries out directives in order. A failover whose config could not be committed is reported failed.
    func execute(_ directives: [ClusterBrain.Directive]) async {
        var uncommitted = false
        for d in directives {
            if uncommitted, case .failoverDone(let victim, _) = d {
                resolveFailover(victim, .failure(.internalError("the failover config of \(victim) was not committed")))
                continue
            }
            if case .publish(let config, let failed, _) = d {
                uncommitted = !(await publishDecided(config, failed: failed))
                continue
            }
            await execute(d)
        }
    }

    func execute(_ d: ClusterBrain.Directive) async {
        switch d {
        case .fence(let reason):
            registry.setFence(reason)
        case .unfence:
            registry.setFence(nil)
        case .pull(let from):
            guard let m = registry.clusterSnapshot.members.first(where: { $0.id == from }) else { return }
            await pull(from: m.node)
        case .adopt, .answerPromise, .answerFence, .commitChange, .changeStale:
            // Performed by whoever fed their event, which holds what they need: `offerDocument` the document's
            // bytes, `promiseRequested` and `fenceRequested` the waiting request, `committed(in:)` the change to
            // commit (ADR 0130). Never returned elsewhere.
            logger.error("a directive reached the wrong interpreter", metadata: ["directive": "\(d)"])
        case .requestFence(let victim, let epoch):
            await requestFence(of: victim, epoch: epoch)
        case .persistPromise(let p):
            let ok = (try? await BlockingPool.run { try self.persistBrainPromise() }) != nil
            if !ok {
                logger.error("could not persist an epoch promise", metadata: ["epoch": "\(p.epoch)"])
                if p.candidate == selfID {
                    await feedAndExecute(.promiseAnswered(from: selfID, epoch: p.epoch, granted: false))
                }
            }
        case .requestPromises(let epoch, let stamp, let voters):
            await requestPromises(epoch: epoch, stamp: stamp, voters: voters)
        case .requestSeqnos(let from):
            await requestSeqnos(from)
        case .push(let config, let failed, let to):
            await pushPreview(config, failed: failed, to: to)
        case .publish(let config, let failed, _):
            _ = await publishDecided(config, failed: failed)
        case .autoFailoverDue(let victim):
            logger.notice("auto-failover", metadata: ["node": "\(victim)"])
            Task { _ = await self.failOver(victim, allowUnsafe: false, automatic: true) }
        case .failoverDone(let victim, let automatic):
            if automatic {
                let registry = self.registry
                try? await BlockingPool.run { try self.stored { try registry.updateAutoFailover { $0.count += 1 } } }
                registry.audit.record(
                    AuditEvent(
                        .failover, fields: [("otp_node", .string(victim.rawValue)), ("type", .string("automatic"))]))
                await publish()
            }
            logger.notice("node failed over", metadata: ["node": "\(victim)", "automatic": "\(automatic)"])
            resolveFailover(victim, .success(()))
        case .failoverRefused(let victim, let why):
            logger.warning("failover refused", metadata: ["node": "\(victim)", "reason": "\(why)"])
            resolveFailover(victim, .failure(Self.requestError(victim, why)), onlyLatest: why == .busy)
        case .changeClaimed(let id, let epoch):
            resolveChange(id, .success(epoch))
        case .changeRefused(let id, let why):
            logger.warning("cluster change refused", metadata: ["reason": "\(why)"])
            resolveChange(id, .failure(why))
        case .rebalance:
            // Only the rebalance's own events lead to these, and its shell performs them (`runRebalanceBucket`).
            break
        }
    }

    static func requestError(_ victim: NodeID, _ why: ClusterBrain.Refusal) -> ClusterRequestError {
        switch why {
        case .unknownNode: return .badRequest(["Unknown server given: \(victim)"])
        case .lastActive: return .badRequest(["Failover would leave no active data nodes."])
        case .busy: return .badRequest(["Another failover is in progress, or the cluster config changed; retry."])
        case .noQuorum(let reason): return .noQuorum(reason)
        case .mayStillServe(let reason):
            return .noQuorum("\(reason) Pass allowUnsafe=true to fail it over anyway.")
        case .notAccepted:
            return .noQuorum(
                "No quorum: a majority of the active members did not accept the failover of \(victim) in time; "
                    + "it may still take effect as the config spreads, check the cluster before retrying.")
        case .epochRefused(let epoch):
            return .noQuorum(
                "No quorum: a majority of the active members did not promise cluster epoch \(epoch) to this node "
                    + "(another node may be changing the cluster); retry the failover of \(victim).")
        case .limitReached(let why):
            return .internalError("The failover of \(victim) was refused: \(why).")
        case .unsafe(let buckets):
            let text = buckets.keys.sorted().map { name -> String in
                let vbs = buckets[name] ?? []
                let sample = vbs.prefix(8).map { "\($0.index)" }.joined(separator: ", ")
                return "\(name): \(vbs.count) vBuckets (\(sample))"
            }.joined(separator: "; ")
            return .badRequest([
                "Failover of \(victim) is unsafe: no surviving copy can be shown to hold every "
                    + "majority-acknowledged write of \(text). Too many copies are lost or did not report their "
                    + "seqnos. Pass allowUnsafe=true to fail over anyway."
            ])
        }
    }

    /// Wakes the failover requests waiting for `victim` (only the latest one for a "busy" answer: it is the one
    /// that was refused, the earlier one still runs).
    func resolveFailover(
        _ victim: NodeID, _ result: Result<Void, ClusterRequestError>, onlyLatest: Bool = false
    ) {
        let waiters = failoverWaiters.withLock { w -> [CheckedContinuation<Result<Void, ClusterRequestError>, Never>] in
            guard var list = w[victim], !list.isEmpty else { return [] }
            if onlyLatest {
                let last = list.removeLast()
                w[victim] = list.isEmpty ? nil : list
                return [last]
            }
            w[victim] = nil
            return list
        }
        for c in waiters { c.resume(returning: result) }
    }

    // MARK: Heartbeats and ticks

    /// Calls each peer every `heartbeatInterval` with at most one call per peer in flight (`HeartbeatSchedule`), and
    /// feeds each answer to the brain as it comes (ADR 0039): a peer that does not answer (paused, cut off) delays
    /// only its own next call, never another peer's answer or the view it carries. Runs until cancelled.
    func runHeartbeats() async {
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled {
                let snapshot = registry.clusterSnapshot
                let peers = snapshot.members.filter { $0.id != selfID }
                let ids = peers.map(\.id)
                let now = brainNow
                let (due, next) = heartbeats.withLock { h in
                    let due = h.due(peers: ids, now: now)
                    return (due, h.nextDue(peers: ids, now: now))
                }
                for m in peers where due.contains(m.id) {
                    group.addTask { await self.heartbeat(m, cluster: snapshot.identity.uuid) }
                }
                let wait = min(max(next ?? Self.heartbeatPoll, Self.heartbeatPoll), Self.heartbeatInterval)
                try? await Task.sleep(for: wait)
            }
        }
    }

    /// One heartbeat to `member`: it is asked for its stamp, promise and view; the answer (or failure) is fed to
    /// the brain at once and the directives it gives are carried out (one pull at a time).
    func heartbeat(_ member: ClusterMember, cluster uuid: String) async {
        let event = await heartbeatEvent(member, cluster: uuid)
        heartbeats.withLock { $0.ended(member.id) }
        for d in feed(event) {
            if case .pull = d {
                guard heartbeats.withLock({ $0.startPull() }) else { continue }
                await execute(d)
                heartbeats.withLock { $0.pullEnded() }
            } else {
                await execute(d)
            }
        }
    }

    /// Calls `m`'s heartbeat route and turns the reply into the brain's event.
    func heartbeatEvent(_ m: ClusterMember, cluster uuid: String) async -> ClusterBrain.Event {
        let creds = internalCredentials
        let me = PercentEncoding.encode(selfID.rawValue)
        let sent = brainNow
        let reply: PeerReply
        do {
            reply = try await peers.call(
                m.node, .GET, "/settee/internal/heartbeat?from=\(me)", credentials: creds,
                timeout: Self.heartbeatCallTimeout)
        } catch {
            return .heartbeatFailed(from: m.id, refused: Self.isRefused(error))
        }
        guard reply.ok, let json = try? JSON.parse(reply.body), json["cluster"]?.stringValue == uuid,
            let epoch = json["epoch"]?.int64Value, let rev = json["rev"]?.int64Value
        else { return .heartbeatFailed(from: m.id, refused: false) }
        let names = json["sees"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let publisher = json["orchestrator"]?.stringValue.map { NodeID($0) }
        let stamp = ConfigStamp(epoch: epoch, rev: rev, publisher: publisher)
        let promised = json["promised"]?.int64Value ?? 0
        // Past `Limits.maxClusterEpoch` / `maxConfigRevision`: a malformed answer, not a peer to follow.
        guard stamp.isWithinLimits, ConfigStamp.isValidEpoch(promised) else {
            return .heartbeatFailed(from: m.id, refused: false)
        }
        return .heartbeatAnswered(
            from: m.id, sent: sent, stamp: stamp, promised: promised, sees: Set(names.map { NodeID($0) }))
    }

    /// Whether a failed call means the peer's port refused the connection: its process is gone (a paused or
    /// cut-off node times out instead).
    static func isRefused(_ error: any Error) -> Bool {
        let text = "\(error)".lowercased()
        return text.contains("connection refused") || text.contains("connectionrefused") || text.contains("errno: 111")
    }

    /// Runs the tick loop (fence, failover timing, auto-failover) until the task is cancelled. The fence is applied
    /// on the spot; rounds a tick starts (promises, seqnos, pushes) run beside the loop so it never waits for them.
    func runTicks() async {
        while !Task.isCancelled {
            await tickOnce()
            try? await Task.sleep(for: Self.tickInterval)
        }
    }

    /// One tick; also run right after this node adopted a config, so a hold on a new epoch's actives goes up
    /// without waiting for the next tick.
    public func tickOnce() async {
        var rounds: [ClusterBrain.Directive] = []
        for d in feed(.tick) {
            switch d {
            case .fence, .unfence: await execute(d)
            default: rounds.append(d)
            }
        }
        if !rounds.isEmpty { Task { await self.execute(rounds) } }
    }

    // MARK: Failover

    /// Hard failover of `node`, decided by the brain: quorum, the wait until a member that may still run has fenced
    /// itself, an epoch claimed from a majority, the survivors' seqnos, `Failover.decide` per bucket (refused as
    /// unsafe unless `allowUnsafe`), the victim told first, then the config published.
    func failOver(_ node: NodeID, allowUnsafe: Bool = false, automatic: Bool = false) async
        -> Result<Void, ClusterRequestError>
    {
        // A failover stops a running rebalance first.
        rebalance.withLock { $0.stopRequested = true }
        while rebalance.withLock({ $0.running }) { try? await Task.sleep(for: .milliseconds(50)) }
        return await topologyLock.withLock { () async -> Result<Void, ClusterRequestError> in
            let result = await withCheckedContinuation {
                (c: CheckedContinuation<Result<Void, ClusterRequestError>, Never>) in
                self.failoverWaiters.withLock { $0[node, default: []].append(c) }
                Task {
                    await self.feedAndExecute(
                        .failoverRequested(node, allowUnsafe: allowUnsafe, automatic: automatic))
                }
                // A brain that never answers would hold the operator forever: bounded by the longest wait it may
                // take (the failover timeout, then a claim, a seqno and a push round) and a margin.
                let limit = Duration.seconds(self.registry.autoFailover.timeout) + .seconds(30)
                Task {
                    try? await Task.sleep(for: limit)
                    self.resolveFailover(node, .failure(.internalError("failover of \(node) did not finish in time")))
                }
            }
            return result
        }
    }

    func requestPromises(epoch: Int64, stamp: ConfigStamp, voters: [NodeID]) async {
        let members = registry.clusterSnapshot.members
        let creds = internalCredentials
        let body: JSON = [
            "epoch": .int(epoch), "candidate": .string(selfID.rawValue),
            "stampEpoch": .int(stamp.epoch), "stampRev": .int(stamp.rev),
            "stampPublisher": stamp.publisher.map { .string($0.rawValue) } ?? .null,
        ]
        let bytes = body.serialized()
        await withTaskGroup(of: Void.self) { group in
            for voter in voters {
                guard let m = members.first(where: { $0.id == voter }) else { continue }
                group.addTask {
                    var granted = false
                    if let reply = try? await self.peers.call(
                        m.node, .POST, "/settee/internal/promise", body: bytes, credentials: creds,
                        timeout: .seconds(3)),
                        reply.ok, let json = try? JSON.parse(reply.body)
                    {
                        granted = json["granted"]?.boolValue ?? false
                    }
                    await self.feedAndExecute(.promiseAnswered(from: voter, epoch: epoch, granted: granted))
                }
            }
        }
    }

    /// Asks the victim of this node's failover to hold its actives back for `epoch` (`POST /settee/internal/fence`)
    /// and feeds back what came of it: a refused connection means its process is gone.
    func requestFence(of victim: NodeID, epoch: Int64) async {
        guard let m = registry.clusterSnapshot.members.first(where: { $0.id == victim }) else { return }
        let body: JSON = ["epoch": .int(epoch), "from": .string(selfID.rawValue)]
        logger.info("failover asks its victim to fence", metadata: ["node": "\(victim)", "epoch": "\(epoch)"])
        let answer: ClusterBrain.FenceAnswer
        do {
            let reply = try await peers.call(
                m.node, .POST, "/settee/internal/fence", body: body.serialized(), credentials: internalCredentials,
                timeout: .seconds(3))
            let fenced = reply.ok ? (try? JSON.parse(reply.body))?["fenced"]?.boolValue : nil
            answer = fenced == true ? .fenced : .notFenced
        } catch {
            answer = Self.isRefused(error) ? .gone : .unanswered
        }
        logger.notice(
            "failover fence request", metadata: ["node": "\(victim)", "epoch": "\(epoch)", "answer": "\(answer)"])
        await feedAndExecute(.fenceAnswered(from: victim, epoch: epoch, answer))
    }

    /// A failover's fence request from `from` (`ClusterBrain.fenceRequested`): the fence is applied before the
    /// answer, so every active vBucket here is pending (and its waiting durable writes answered) when the
    /// orchestrator hears `true`.
    func fenceRequested(from: NodeID, epoch: Int64) async -> Bool {
        var fenced = false
        for d in feed(.fenceRequested(from: from, epoch: epoch)) {
            if case .answerFence(_, _, let yes) = d {
                fenced = yes
            } else {
                await execute(d)
            }
        }
        logger.notice(
            "fence requested for a failover", metadata: ["by": "\(from)", "epoch": "\(epoch)", "fenced": "\(fenced)"])
        return fenced
    }

    func requestSeqnos(_ from: [NodeID]) async {
        let snapshot = registry.clusterSnapshot
        let buckets = snapshot.buckets.map(\.settings.name)
        await withTaskGroup(of: Void.self) { group in
            for id in from {
                guard let m = snapshot.members.first(where: { $0.id == id }) else { continue }
                group.addTask {
                    var rows: [String: [UInt64]]? = [:]
                    for bucket in buckets {
                        guard let row = try? await self.fetchSeqnos(m.node, bucket: bucket, timeout: .seconds(3)) else {
                            rows = nil
                            break
                        }
                        rows?[bucket] = row.map(\.high)
                    }
                    await self.feedAndExecute(.seqnosAnswered(from: id, rows))
                }
            }
        }
    }

    /// The registry edit that installs a failover config the brain decided.
    static func apply(_ config: ClusterBrain.Config, failed: NodeID?)
        -> @Sendable (inout [ClusterMember], inout [String: BucketPlacement]) throws -> Void
    {
        { members, placements in
            for (bucket, placement) in config.placements where placements[bucket] != nil {
                placements[bucket] = placement
            }
            for i in members.indices where members[i].id == failed {
                members[i].membership = .inactiveFailed
                members[i].recoveryType = nil
            }
        }
    }

    /// Pushes a failover config nobody adopted yet (this node included) to `to` in parallel, feeding back each
    /// answer: the victim first, then the others until a majority accepted.
    func pushPreview(_ config: ClusterBrain.Config, failed: NodeID?, to: [NodeID]) async {
        let registry = self.registry
        guard EpochRules.nextRevision(after: registry.clusterStamp.revision.rev) == config.stamp.rev,
            let doc = try? await BlockingPool.run({
                try registry.clusterDocumentPreview(epoch: config.stamp.epoch, Self.apply(config, failed: failed))
            })
        else { return }
        let members = registry.clusterSnapshot.members
        let creds = internalCredentials
        await withTaskGroup(of: Void.self) { group in
            for id in to {
                guard let m = members.first(where: { $0.id == id }) else { continue }
                group.addTask {
                    var accepted = false
                    if let reply = try? await self.peers.call(
                        m.node, .POST, "/settee/internal/config", body: doc, credentials: creds, timeout: .seconds(3)),
                        reply.ok, let json = try? JSON.parse(reply.body)
                    {
                        accepted =
                            json["epoch"]?.int64Value == config.stamp.epoch
                            && json["rev"]?.int64Value == config.stamp.rev
                    }
                    await self.feedAndExecute(.pushAnswered(from: id, stamp: config.stamp, accepted: accepted))
                }
            }
        }
    }

    /// Commits a failover config the brain decided at its claimed epoch, then pushes it to every member. Returns
    /// whether it was committed.
    func publishDecided(_ config: ClusterBrain.Config, failed: NodeID?) async -> Bool {
        let registry = self.registry
        do {
            let expected = config.stamp.rev
            // Already here: pulled from a peer that accepted the push before the majority was counted.
            if registry.clusterStamp == config.stamp {
                await publish()
                return true
            }
            guard EpochRules.nextRevision(after: registry.clusterStamp.revision.rev) == expected else {
                logger.warning(
                    "failover config outdated before it was committed", metadata: ["stamp": "\(config.stamp)"])
                return false
            }
            let committed = try await BlockingPool.run {
                try self.stored { () throws -> Bool in
                    // Checked again in the store's order: an adoption may have come in between.
                    guard EpochRules.nextRevision(after: registry.clusterStamp.revision.rev) == expected else {
                        return false
                    }
                    try registry.updateCluster(epoch: config.stamp.epoch, Self.apply(config, failed: failed))
                    return true
                }
            }
            guard committed else {
                logger.warning(
                    "failover config outdated before it was committed", metadata: ["stamp": "\(config.stamp)"])
                return false
            }
        } catch {
            logger.error("could not commit the failover config", metadata: ["error": "\(error)"])
            return false
        }
        if failed == nil {
            // A failover's release or a repair (ADR 0120): the same map, one epoch later.
            logger.notice(
                "cluster config republished unchanged", metadata: ["epoch": "\(config.stamp.epoch)"])
        }
        await publish()
        return true
    }
}
