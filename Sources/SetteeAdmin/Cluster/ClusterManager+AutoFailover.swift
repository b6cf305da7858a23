import Foundation
import Logging
import SetteeClusterMap
import SetteeCore
import SetteeStorage
import Synchronization

/// Auto-failover (off by default): run by the orchestrator after each heartbeat round.
///
/// The decision is `FailureDetector` (pure, in SetteeClusterMap), fed the views this node has: its own and each
/// reachable peer's (sent with its heartbeat answer). A node is failed over automatically when all of these hold:
/// 1. auto-failover is enabled and fewer than `maxCount` auto-failovers happened since the last reset;
/// 2. this node is the orchestrator and reaches a strict majority of the active members (itself included): a
///    node on the minority side of a partition never fails anyone over;
/// 3. a strict majority of the other members cannot reach the node (one cut link is not a dead node), and it
///    has been so for at least `timeout` seconds, and it is the only such member;
/// 4. the failover is safe (`Failover.decide`): auto-failover never does an unsafe one.
extension ClusterManager {
    func autoFailoverRound() async {
        let settings = registry.autoFailover
        let actives = registry.clusterSnapshot.members.filter { $0.membership == .active }.map(\.id)
        let views = currentViews()
        let now = ContinuousClock.now - startedAt
        // The detector runs every round (so "down since" is measured), acted on only when enabled.
        let verdict = detector.withLock {
            $0.round(now: now, members: actives, me: selfID, views: views, timeout: .seconds(settings.timeout))
        }
        guard settings.enabled, settings.count < settings.maxCount, isOrchestrator else { return }
        if !verdict.hasQuorum {
            if !verdict.down.isEmpty {
                logger.warning("auto-failover skipped: no majority", metadata: ["down": "\(verdict.down)"])
            }
            return
        }
        guard let victim = verdict.failOver else { return }
        logger.notice("auto-failover", metadata: ["node": "\(victim)", "timeout": "\(settings.timeout)"])
        switch await failOver(victim, allowUnsafe: false) {
        case .success:
            let registry = self.registry
            try? await Blocking.run { try registry.updateAutoFailover { $0.count += 1 } }
            await publish()
        case .failure(let e):
            logger.error("auto-failover failed", metadata: ["node": "\(victim)", "error": "\(e)"])
        }
    }
}
