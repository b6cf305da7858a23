/// What each node says about durable writes at the end of a run: its bucket's counts since the node's last start
/// (`settee_bucket_sync_writes_total` in `/metrics`, ADR 0086). Reported beside what the clients were told, so a run
/// shows whether the nodes said they were aborting writes while the clients got ambiguous answers; not a check (a
/// restarted node counts from zero, and a client's timeout is not a node's abort).
public struct NodeSyncWrites: Hashable, Sendable {
    public var node: String
    public var accepted = 0
    public var committed = 0
    public var aborted = 0
    public var replicaAccepted = 0

    public init(node: String) { self.node = node }

    /// The counts of `bucket` in a `/metrics` text; nil when it has none of them (no such bucket, an older node).
    public static func parse(node: String, metrics: String, bucket: String) -> NodeSyncWrites? {
        var counts = NodeSyncWrites(node: node)
        var seen = false
        let prefix = "settee_bucket_sync_writes_total{bucket=\"\(bucket)\","
        for line in metrics.split(separator: "\n") where line.hasPrefix(prefix) {
            let rest = line.dropFirst(prefix.count)
            guard let close = rest.firstIndex(of: "}"),
                let value = Double(rest[rest.index(after: close)...].trimmingPrefix(" "))
            else { continue }
            let labels = rest[..<close]
            let n = Int(value)
            switch (labels.contains("state=\"active\""), labels.contains("state=\"replica\"")) {
            case (true, _) where labels.contains("outcome=\"accepted\""): counts.accepted = n
            case (true, _) where labels.contains("outcome=\"committed\""): counts.committed = n
            case (true, _) where labels.contains("outcome=\"aborted\""): counts.aborted = n
            case (_, true) where labels.contains("outcome=\"accepted\""): counts.replicaAccepted = n
            default: continue
            }
            seen = true
        }
        return seen ? counts : nil
    }
}
