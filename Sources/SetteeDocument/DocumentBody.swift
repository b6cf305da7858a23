import SetteeCore
import SetteeJSON

/// A document body as a client sent it, split into the user's properties and CouchDB's special
/// members (`_id`, `_rev`, `_deleted`, `_attachments`, `_revisions`, and the ones Sync Gateway
/// tolerates: `_exp`, `_removed`, `_conflicts`, `_deleted_conflicts`, `_local_seq`).
public struct DocumentBody: Sendable {
    /// The body without any `_` member, in the order sent.
    public var properties: JSON
    public var id: String?
    public var rev: RevID?
    public var deleted: Bool
    public var attachments: JSON?
    public var revisions: JSON?
    /// `_exp` as sent (number of seconds or absolute time, or an ISO-8601 string).
    public var expiry: JSON?

    private static let ignored: Set<String> = ["_removed", "_conflicts", "_deleted_conflicts", "_local_seq"]

    public init(_ json: JSON) throws(DocumentError) {
        guard case .object(let members) = json else { throw .badRequest("Document body must be JSON object") }
        var properties: [(String, JSON)] = []
        id = nil
        rev = nil
        deleted = false
        attachments = nil
        revisions = nil
        expiry = nil
        for (name, value) in members {
            guard name.hasPrefix("_") else {
                properties.append((name, value))
                continue
            }
            switch name {
            case "_id":
                guard let s = value.stringValue, !s.isEmpty else { throw .badRequest("Invalid doc ID") }
                id = s
            case "_rev":
                if value.isNull { continue }
                guard let s = value.stringValue, let r = RevID(s) else { throw .badRequest("Invalid revision ID") }
                rev = r
            case "_deleted":
                guard let b = value.boolValue else { throw .badRequest("_deleted must be a boolean") }
                deleted = b
            case "_attachments":
                if value.isNull { continue }
                guard case .object = value else { throw .badRequest("_attachments must be an object") }
                attachments = value
            case "_revisions":
                guard case .object = value else { throw .badRequest("Bad _revisions") }
                revisions = value
            case "_exp":
                expiry = value
            default:
                guard Self.ignored.contains(name) else {
                    throw .badRequest(
                        "user defined top level properties beginning with '_' are not allowed in document body")
                }
            }
        }
        self.properties = .object(properties)
    }

    /// The history of a replicated revision (`new_edits=false`), newest first: its first element is the revision
    /// itself. See `replicatedHistory(rev:revisions:)`.
    public func replicatedHistory() throws(DocumentError) -> [RevID] {
        try Self.replicatedHistory(rev: rev, revisions: revisions)
    }

    /// The one rule for the revision and history a `new_edits=false` write names, as CouchDB and Sync Gateway
    /// read them (couch_doc `transfer_fields`, Sync Gateway db/revtree.go `ParseRevisions`):
    /// - `_revisions` `{"start": N, "ids": [digests, newest first]}` alone: the revision is `N-ids[0]`
    ///   (PouchDB and CouchDB replicators may send no `_rev`);
    /// - `_rev` alone: a history of that one revision;
    /// - both: they must name the same revision, else 400 (Sync Gateway silently takes `_revisions`, CouchDB
    ///   whichever member comes last: a body that says two things is refused rather than guessed);
    /// - neither: 400 `Missing _rev`.
    /// `start` must be an integer in 1...`Limits.maxRevGeneration` and at least the number of ids, each id a valid
    /// digest (`RevTree.parseRevisions`); every shape error is 400 `Bad _revisions: <why>`.
    public static func replicatedHistory(rev: RevID?, revisions: JSON?) throws(DocumentError) -> [RevID] {
        guard let revisions else {
            guard let rev else { throw .badRequest("Missing _rev (or _revisions) with new_edits=false") }
            return [rev]
        }
        guard let start = revisions["start"]?.intValue, start >= 1, start <= Limits.maxRevGeneration else {
            throw .badRequest("Bad _revisions: start must be an integer from 1 to \(Limits.maxRevGeneration)")
        }
        guard let digest = revisions["ids"]?.arrayValue?.first?.stringValue, RevID.isValidDigest(digest) else {
            throw .badRequest("Bad _revisions: ids must be a non-empty list of revision digests")
        }
        let head = RevID(generation: start, digest: digest)
        if let rev, rev != head { throw .badRequest("Bad _revisions: _rev \(rev) is not its head \(head)") }
        do { return try RevTree.parseRevisions(revisions, rev: head) } catch {
            throw .badRequest(error.description)
        }
    }

    /// The body a revision is digested and stored as: the properties plus `_attachments` when present.
    public var storedBody: JSON {
        var body = properties
        if let attachments { body.set("_attachments", attachments) }
        return body
    }
}
