import SetteeDocument
import SetteeReplication

extension LocalEndpoint: RevisionParents {
    /// Each revision's parent in the local revision tree, which a BLIP push proposes as the server's revision
    /// (replication-protocol.adoc §proposeChanges). Body sizes are not kept apart from the bodies, so none is given.
    public func parents(of revisions: [(id: String, rev: String)]) async throws -> [(parent: String?, bodySize: Int?)] {
        let asked = revisions.map { ($0.id, $0.rev) }
        do {
            let collection = collection
            return try await database.perform { _ throws(LiteError) in
                let db = collection
                var trees: [String: RevTree] = [:]
                var out: [(parent: String?, bodySize: Int?)] = []
                for (id, text) in asked {
                    if trees[id] == nil { trees[id] = try db.revisionTree(of: id) ?? RevTree() }
                    let parent = RevID(text).flatMap { trees[id]?.parent(of: $0) }
                    out.append((parent: parent?.description, bodySize: nil))
                }
                return out
            }
        } catch {
            throw Self.replicationError(error)
        }
    }
}
