import Foundation
import SetteeTestSupport
import Testing

/// The official Couchbase Python SDK's sub-document API against one real settee node (`sdk/sdk_subdoc.py`).
@Suite(.serialized, .onTestThreads) struct SubdocProcessTests {
    /// Proves the unchanged SDK's `lookup_in` (get, exists, count, whole document, last element, backticked
    /// names) and `mutate_in` (upsert, insert, replace, remove, array append/prepend/insert/add-unique,
    /// increment/decrement, create_parents) work on a node, with the SDK's exceptions for each per-path
    /// failure (multi-path lookups fail per spec, multi-path mutations all or nothing), CAS, insert/upsert
    /// store semantics, a whole-document replace, expiry and durability; and that the collection manager
    /// lists `_default._default` while a named collection is refused; stored XATTRs (user and system, macros,
    /// kept by a full-document upsert, hidden from `get`, system ones kept on the tombstone; ADR 0029).
    @Test func officialPythonSDKSubdocument() throws {
        try PythonSDKProcessTests.runOnOneNode(script: "sdk_subdoc.py", name: "python-subdoc", passes: 9)
    }

    /// Proves the unchanged SDK's sub-document API on a 3-node cluster (replicaNumber 1): majority-durable
    /// `mutate_in` applies and reads back; during a rebalance that adds a fourth node every `mutate_in` (counter
    /// increment) and `lookup_in` succeeds, and afterwards each counter equals its acknowledged increments exactly
    /// (none lost, none applied twice by a retry). Then a member is SIGKILLed and failed over: every
    /// majority-durable `mutate_in` acknowledged before is read back (after at most the timeouts Couchbase
    /// documents while the SDK learns the map), and `mutate_in` applies once afterwards.
    @Test func officialPythonSDKSubdocumentThroughRebalanceAndFailover() throws {
        try PythonSDKProcessTests.runThroughRebalanceAndFailover(
            script: "sdk_subdoc_cluster.py", name: "python-subdoc-cluster", passes: 3)
    }
}
