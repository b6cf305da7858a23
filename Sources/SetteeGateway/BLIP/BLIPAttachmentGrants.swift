import SetteeCore

/// The attachments one BLIP connection may fetch with `getAttachment`: those of revisions it was sent
/// (replication-protocol.adoc §getAttachment: a server with per-document access MUST check that the digest is in a
/// document the client may read; Sync Gateway's `allowedAttachments`). Under CBMobile_3 a grant is the document id
/// and the digest (the request names both), under CBMobile_2 the digest alone. Bounded: past
/// `Limits.gatewayBLIPAttachmentGrants` the oldest grant is forgotten (Sync Gateway forgets a grant once the client
/// answered the revision; clients that never answer, as pythonblip, keep theirs here until they fall off the end).
struct BLIPAttachmentGrants: Sendable {
    private var keys: Set<String> = []
    private var order: [String] = []
    private var head = 0
    let capacity: Int

    init(capacity: Int = Limits.gatewayBLIPAttachmentGrants) {
        self.capacity = max(1, capacity)
    }

    /// The grant of `digest` (of document `docID` under CBMobile_3) sent on collection index `collection` (nil: no
    /// `collection` property), so a grant in one collection opens nothing in another.
    static func key(docID: String?, digest: String, collection: String? = nil) -> String {
        var key = collection.map { $0 + "\u{0}" } ?? ""
        if let docID { key += docID + "\u{0}" }
        return key + digest
    }

    /// Grants `key`; the oldest grant goes once the bound is reached.
    mutating func grant(_ key: String) {
        guard keys.insert(key).inserted else { return }
        order.append(key)
        if keys.count > capacity, head < order.count {
            keys.remove(order[head])
            head += 1
        }
        // The forgotten prefix is dropped once it is half the array, so the array stays within twice the bound.
        if head > capacity {
            order.removeFirst(head)
            head = 0
        }
    }

    func allows(_ key: String) -> Bool { keys.contains(key) }

    var count: Int { keys.count }
}
