import SetteeReplication

/// Which way a Lite database replicates with a remote database URL.
public enum ReplicationDirection: Sendable, Equatable {
    /// Remote changes into the local database.
    case pull(from: String)
    /// Local changes to the remote database.
    case push(to: String)
}

extension Replicator {
    /// The app-facing shape: `Replicator(db, .pull(from: url), continuous: true,
    /// authenticator: .basic(user: "jane", password: "..."), channels: ["_public"])`. Credentials in
    /// the URL become basic auth unless `authenticator` says otherwise; `channels` filters by
    /// channel (`sync_gateway/bychannel`), `documentIDs` by id (the seed 002 sender's "only these"). A `ws://` or
    /// `wss://` URL replicates over BLIP (`wss` trusts the system's roots, or with `?cert=sha256:<hex>` exactly the
    /// certificate it pins, as a peer listener's sync URL says; `WebSocketBLIPConnector` takes other trust), an
    /// `http(s)://` one over the CouchDB protocol (with a pin too: `RemoteEndpoint`).
    public convenience init(
        _ database: Database, _ direction: ReplicationDirection, continuous: Bool = false,
        authenticator: ReplicationAuthenticator = .none, channels: [String]? = nil, documentIDs: [String]? = nil
    ) throws(ReplicationError) {
        var options = ReplicatorOptions(continuous: continuous)
        if let documentIDs {
            options.filter = .docIDs(documentIDs)
        } else if let channels {
            options.filter = .channels(channels)
        }
        let local = LocalEndpoint(database)
        let url: String
        switch direction {
        case .pull(let u), .push(let u): url = u
        }
        // `ws`/`wss`: the BLIP replication protocol of Couchbase Lite 2+ (replication-protocol.adoc); http(s): CouchDB's.
        if url.hasPrefix("ws://") || url.hasPrefix("wss://") {
            let connector = try WebSocketBLIPConnector(databaseURL: url, authenticator: authenticator)
            let role: BLIPEndpoint.Role
            if case .pull = direction { role = .pullSource } else { role = .pushTarget }
            self.init(
                blip: connector, remoteIdentity: connector.databaseURL, local: local, role: role,
                options: options, maxHistory: database.options.revsLimit)
            return
        }
        switch direction {
        case .pull(let url):
            options.skipsTombstonesIntoEmptyTarget = true
            self.init(
                source: try RemoteEndpoint(url: url, authenticator: authenticator), target: local, options: options)
        case .push(let url):
            self.init(
                source: local, target: try RemoteEndpoint(url: url, authenticator: authenticator), options: options)
        }
    }
}
