import Logging

extension Replicator {
    /// A replication with a remote database over the BLIP replication protocol (couchbase-lite-core
    /// `modules/docs/pages/replication-protocol.adoc`, §4 Algorithm): `BLIPEndpoint` on the remote side, `local` on
    /// the other, the same state machine, status, retries and backoff as over the CouchDB REST protocol.
    ///
    /// - Parameters:
    ///   - remoteIdentity: the remote database's URL without credentials (`ws://host:4984/db`).
    ///   - role: `.pullSource` pulls the remote into `local`, `.pushTarget` pushes `local` to it.
    ///   - maxHistory: the revision history a pulled `rev` may carry (the local revision tree's depth).
    public convenience init(
        blip connector: any BLIPConnector, remoteIdentity: String, local: any ReplicationEndpoint,
        role: BLIPEndpoint.Role, options: ReplicatorOptions = .init(), maxHistory: Int = 20,
        logger: Logger = Logger(label: "settee.replicator")
    ) {
        let remote = BLIPEndpoint(
            role: role, identity: remoteIdentity, connector: connector, local: local, continuous: options.continuous,
            maxHistory: maxHistory, logger: logger)
        var options = options
        options.shortBatchEndsOneShot = false
        switch role {
        case .pullSource:
            // One `changes` request is answered once, with every revision wanted: a batch is fetched in one piece.
            options.bulkGetBatchSize = max(options.bulkGetBatchSize, 1 << 20)
            self.init(source: remote, target: local, options: options, logger: logger)
        case .pushTarget:
            self.init(
                source: BLIPPushSource(local: local, remote: remote), target: remote, options: options, logger: logger)
        }
    }
}
