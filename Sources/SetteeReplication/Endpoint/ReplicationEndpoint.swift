import SetteeJSON

/// A database that speaks the replication protocol: a remote one over HTTP (`RemoteEndpoint`), Lite's
/// local database (`LocalEndpoint` in SetteeLite), or an in-memory one in tests. Errors should be
/// `ReplicationError` (others count as non-transient).
public protocol ReplicationEndpoint: Sendable {
    /// `GET /db/`: at least `update_seq`.
    func info() async throws -> JSON
    /// One batch of `_changes` after `since` (nil: from the start), `style=all_docs`. A `longpoll` call
    /// waits for a change (or the feed's timeout, then answers no rows); `continuous` returns once at least
    /// one row came and the stream paused, or `limit` rows came.
    func changes(since: String?, limit: Int, feed: ChangesFeedKind, filter: ReplicationFilter?, heartbeatMs: Int?)
        async throws -> ChangesBatch
    /// `_revs_diff`: `{"docid":{"missing":[...],"possible_ancestors":[...]}}`, only docs missing something.
    func revsDiff(_ request: [String: [String]]) async throws -> JSON
    /// The asked revisions with `_revisions` and attachment bytes (see `FetchedRevision`); a revision the
    /// source cannot give comes back with `error` set.
    func bulkGet(_ requests: [BulkGetRequest]) async throws -> [FetchedRevision]
    /// `_bulk_docs`; with `newEdits: false` each revision is grafted with its `_revisions` history.
    /// Returns one row per document: `{"id","rev","ok":true}` or `{"id","error","reason","status"?}`.
    func bulkDocs(_ docs: [FetchedRevision], newEdits: Bool) async throws -> [JSON]
    /// `GET /db/_local/<id>` (id without the `_local/` prefix); nil when absent.
    func getLocal(_ id: String) async throws -> JSON?
    /// `PUT /db/_local/<id>`; the body carries `_rev` when updating.
    func putLocal(_ id: String, _ body: JSON) async throws
    /// `POST /db/_ensure_full_commit`: returns once everything this database acknowledged is on disk,
    /// with its `instance_start_time`, which changes when the database process restarts (nil when the
    /// endpoint does not offer the call). The replicator calls it before each checkpoint: a changed start
    /// time means writes acknowledged by the previous instance may be gone, so the batch is sent again.
    func ensureFullCommit() async throws -> String?

    /// The replication using this endpoint stopped (finished, stopped or given up): an endpoint holding a session
    /// (`BLIPEndpoint`'s connection) ends it. The default does nothing.
    func replicationEnded() async

    /// A stable name of this database for replication ids: a URL without credentials, or
    /// `lite:<database uuid>`. Two endpoints naming different databases must differ.
    var identity: String { get }
}

extension ReplicationEndpoint {
    public var identity: String { String(describing: type(of: self)) }
    public func replicationEnded() async {}
}
