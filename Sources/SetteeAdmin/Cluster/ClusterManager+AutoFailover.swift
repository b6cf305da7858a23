import Foundation
import Logging
import SetteeClusterMap
import SetteeCore
import SetteeStorage
import Synchronization

/// Auto-failover (off by default): run by the orchestrator after each heartbeat round.
///
/// A node is failed over automatically when all of these hold:
/// 1. auto-failover is enabled and fewer than `maxCount` auto-failovers happened since the last reset;
/// 2. this node is the orchestrator (so at most one node decides; if the orchestrator itself is the one
///    that died, the next-lowest healthy node is orchestrator by then);
/// 3. the node is an active member not heard from for at least `timeout` seconds;
/// 4. exactly one active member is down, and this node reaches a strict majority of the active members
///    (itself included): a node on the minority side of a partition never fails anyone over.
extension ClusterManager {
    /// Seconds since `node` was last heard from (since this node started, if never).
    func silence(of node: NodeID) -> Duration {
        let now = ContinuousClock.now
        guard let seen = healthLastSeen(node) else { return now - startedAt }
        return now - seen
    }

    func autoFailoverRound() async {
        let settings = registry.autoFailover
        guard settings.enabled, settings.count < settings.maxCount, isOrchestrator else { return }
        let actives = registry.clusterSnapshot.members.filter { $0.membership == .active }
        let down = actives.filter { status(of: $0.id) == "unhealthy" }
        guard down.count == 1, let victim = down.first else { return }
        let reachable = actives.count - down.count
        guard reachable * 2 > actives.count else {
            logger.warning("auto-failover skipped: no majority", metadata: ["down": "\(victim.id)"])
            return
        }
        guard silence(of: victim.id) >= .seconds(settings.timeout) else { return }
        logger.notice("auto-failover", metadata: ["node": "\(victim.id)", "timeout": "\(settings.timeout)"])
        switch await failOver(victim.id) {
        case .success:
            let registry = self.registry
            try? await Blocking.run { try registry.updateAutoFailover { $0.count += 1 } }
            await publish()
        case .failure(let e):
            logger.error("auto-failover failed", metadata: ["node": "\(victim.id)", "error": "\(e)"])
        }
    }
}
