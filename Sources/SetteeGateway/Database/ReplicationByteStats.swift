import Synchronization

/// Bytes of BLIP frames (`/_blipsync`, as sent and received on the WebSocket: after deflate, headers and checksums
/// included) over every connection to one database: Sync Gateway's `per_db.database.replication_bytes_sent` and
/// `replication_bytes_received`, shown by `/_expvar` and `/_metrics`. What delta sync is measured by.
final class ReplicationByteStats: Sendable {
    private let sentBytes = Atomic<Int>(0)
    private let receivedBytes = Atomic<Int>(0)

    func sent(_ n: Int) { sentBytes.add(n, ordering: .relaxed) }
    func received(_ n: Int) { receivedBytes.add(n, ordering: .relaxed) }

    var bytesSent: Int { sentBytes.load(ordering: .relaxed) }
    var bytesReceived: Int { receivedBytes.load(ordering: .relaxed) }
}
