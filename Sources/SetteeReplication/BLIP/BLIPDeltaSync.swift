import SetteeBLIP
import SetteeCore
import SetteeJSON

/// Delta sync over BLIP (ADR 0125; replication-protocol.adoc §rev `deltaSrc`, §changes `deltas`), the pieces both
/// passive sides share (the gateway's `BLIPSyncHandler`/`BLIPChangesFeed`, Lite's `BLIPReplicationServer`) and the
/// active side's `BLIPReplicationWire.revRequest` builds on:
/// - a side that takes deltas says `deltas: true` on its `changes`/`proposeChanges` answers (`property`); a puller
///   says it on its `changes` answers, and the revisions it wants may then come as a `rev` whose body is a JSON delta
///   against `deltaSrc`, the first revision it named as one it has;
/// - a `rev` with `deltaSrc` is made whole against the stored body of that revision (`applyPushed`); a source that is
///   unknown, not kept, a tombstone or a removal, or a delta that does not apply, is 422 with Sync Gateway's texts,
///   on which the sender sends the revision again whole (`sendWholeAfter`).
///
/// Bodies on both ends are as a `rev` carries them (`BLIPReplicationWire.sentMembers`: no `_id`/`_rev`/`_revisions`/
/// `_deleted`, `_attachments` as stubs), so a receiver applies a delta to its own copy of the source as it was sent.
public enum BLIPDeltaSync {
    /// The answer property saying this side takes deltas.
    public static let property = (name: "deltas", value: "true")

    /// Whether a puller takes deltas after its `changes` answer said `value` (Sync Gateway's `setUseDeltas`): on
    /// when it says `true` and this side has delta sync `enabled`, off when it says anything else; an answer
    /// without the property changes nothing (`current`).
    public static func peerTakesDeltas(said value: String?, enabled: Bool, current: Bool) -> Bool {
        guard let value else { return current }
        return value == "true" && enabled
    }

    /// The body of a revision (`members`, serialized as `whole`) as a JSON delta against the stored `source` body
    /// (CouchDB-shaped), when `source` is live and the delta is smaller than `whole`; nil sends the body whole.
    public static func delta(from source: JSON, to members: [(String, JSON)], whole: [UInt8]) -> [UInt8]? {
        guard let old = BLIPReplicationWire.sentMembers(ofLive: source) else { return nil }
        let delta = JSONDelta.create(from: .object(old), to: .object(members)).serialized()
        return delta.count < whole.count ? delta : nil
    }

    /// A pushed `rev` body that is a JSON `delta` made whole against `sourceBody`, the stored (CouchDB-shaped) body of
    /// revision `source` of document `docID` (Sync Gateway's `processRev`).
    /// - Throws: `CouchError` 422 when the source is a tombstone or a removal stub, or the delta does not apply.
    public static func applyPushed(
        _ delta: JSON, docID: String, source: String, sourceBody: JSON
    ) throws(CouchError) -> JSON {
        if sourceBody["_deleted"]?.boolValue == true {
            throw .status(422, "Can't use delta. Found tombstone for doc \(LogText.userData(docID))")
        }
        guard let base = BLIPReplicationWire.sentMembers(ofLive: sourceBody) else {
            throw .status(422, "Can't fetch doc \(LogText.userData(docID)) for deltaSrc=\(source)")
        }
        do {
            return try JSONDelta.apply(delta, to: .object(base))
        } catch {
            throw .status(422, "Error patching deltaSrc with delta: \(error.reason)")
        }
    }

    /// A `deltaSrc` that is no revision id: 422.
    public static func invalidSource(_ source: String) -> CouchError {
        .status(422, "Invalid deltaSrc \(LogText.quoted(source))")
    }

    /// A `deltaSrc` whose body cannot be read (unknown, no longer kept, not readable by the user): 422 with `reason`.
    public static func sourceUnreadable(docID: String, source: String, reason: String) -> CouchError {
        .status(422, "Can't fetch doc \(LogText.userData(docID)) for deltaSrc=\(source): \(reason)")
    }

    /// Whether `answer` to a `rev` sent as a delta asks for the revision whole: an HTTP-domain 422 (Couchbase Lite's
    /// delta base unknown or corrupt delta) or 404, as Sync Gateway resends on.
    public static func sendWholeAfter(_ answer: BLIPMessage?) -> Bool {
        guard let answer, answer.type == .error, answer["Error-Domain"] ?? "HTTP" == "HTTP" else { return false }
        return answer["Error-Code"] == "422" || answer["Error-Code"] == "404"
    }
}
