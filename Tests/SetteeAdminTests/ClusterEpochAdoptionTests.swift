import Foundation
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Testing

/// The registry's side of the epoch rules (ADR 0023): promises are persisted, and adoption honours them.
@Suite struct ClusterEpochAdoptionTests {
    /// The node's cluster document with its revision and publisher replaced.
    static func variant(_ registry: NodeRegistry, epoch: Int64, rev: Int64, publisher: String, name: String) throws
        -> [UInt8]
    {
        let doc = try JSON.parse(registry.clusterDocument())
        guard case .object(var members) = doc else { throw CancellationError() }
        func set(_ key: String, _ value: JSON) {
            if let i = members.firstIndex(where: { $0.0 == key }) {
                members[i].1 = value
            } else {
                members.append((key, value))
            }
        }
        set("revEpoch", .int(epoch))
        set("lastRev", .int(rev))
        set("orchestrator", .string(publisher))
        if let i = members.firstIndex(where: { $0.0 == "cluster" }), case .object(var cluster) = members[i].1,
            let j = cluster.firstIndex(where: { $0.0 == "name" })
        {
            cluster[j].1 = .string(name)
            members[i].1 = .object(cluster)
        }
        return JSON.object(members).serialized()
    }

    /// Proves the adoption rule on a real registry: once this node promised epoch 5 to a candidate, a config from
    /// epoch 4 is refused whatever its revision (before, the greater `(epoch, rev)` alone decided, so an orchestrator
    /// cut off from the majority could win with a high `rev`), a config of epoch 5 is taken, and the promise
    /// survives adoption (it is the node's own word, not the sender's). A second candidate cannot get epoch 5, and
    /// nobody gets an epoch the node's config already has.
    @Test func configBelowThePromisedEpochIsRefusedWhateverItsRev() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { _ = registry.shutdown() }
        try registry.initialize(username: "Administrator", password: "password")
        let held = registry.clusterStamp
        let a = NodeID("n_a@127.0.0.1")
        let b = NodeID("n_b@127.0.0.1")
        #expect(try registry.promiseEpoch(5, to: a, candidateStamp: held))
        #expect(try !registry.promiseEpoch(5, to: b, candidateStamp: held))
        #expect(registry.epochPromise == EpochPromise(epoch: 5, candidate: a))

        let stale = try Self.variant(registry, epoch: 4, rev: 999, publisher: b.rawValue, name: "minority")
        #expect(try !registry.adoptClusterDocument(stale))
        let claimed = try Self.variant(registry, epoch: 5, rev: held.rev + 1, publisher: a.rawValue, name: "majority")
        #expect(try registry.adoptClusterDocument(claimed))
        #expect(registry.clusterIdentity.name == "majority")
        #expect(registry.epochPromise == EpochPromise(epoch: 5, candidate: a))
        #expect(try !registry.promiseEpoch(5, to: a, candidateStamp: registry.clusterStamp))
        #expect(try registry.promiseEpoch(6, to: b, candidateStamp: registry.clusterStamp))
    }
}
