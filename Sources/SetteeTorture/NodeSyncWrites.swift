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

    /// Each series' labels after the bucket's, in the order the node writes them (`NodeMetrics`), and its field.
    private static let series: [(labels: String, count: any WritableKeyPath<NodeSyncWrites, Int> & Sendable)] = [
        (#"state="active",outcome="accepted""#, \.accepted), (#"state="active",outcome="committed""#, \.committed),
        (#"state="active",outcome="aborted""#, \.aborted), (#"state="replica",outcome="accepted""#, \.replicaAccepted),
    ]

    /// The counts of `bucket` in a `/metrics` text; nil when it has none of them (no such bucket, an older node).
    public static func parse(node: String, metrics: String, bucket: String) -> NodeSyncWrites? {
        var counts = NodeSyncWrites(node: node)
        var seen = false
        let prefixes = series.map { ("settee_bucket_sync_writes_total{bucket=\"\(bucket)\",\($0.labels)} ", $0.count) }
        for line in metrics.split(separator: "\n") {
            for (prefix, count) in prefixes {
                guard line.hasPrefix(prefix), let value = Double(line.dropFirst(prefix.count)) else { continue }
                counts[keyPath: count] = Int(value)
                seen = true
            }
        }
        return seen ? counts : nil
    }
}
