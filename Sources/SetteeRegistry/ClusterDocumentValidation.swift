import SetteeAuth
import SetteeClusterMap
import SetteeCore

/// The one bucket-name rule (ns_server's): 1 to `Limits.maxBucketNameLength` bytes of `A-Z a-z 0-9 _ . - %`,
/// not starting with a dot. It also keeps every bucket directory (`buckets/<name>-<uuid>`) inside the data
/// directory: no `/`, no `..` component, no NUL. Every way a bucket name enters a node checks it: the REST API
/// (`BucketValidation`), a cluster document from a peer and the metadata file at start (`NodeMetadata.validate`).
public enum BucketName {
    public static func isValid(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= Limits.maxBucketNameLength && name.utf8.allSatisfy(isNameByte)
            && !name.hasPrefix(".")
    }

    public static func isNameByte(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "-"),
            UInt8(ascii: "%"):
            true
        default: false
        }
    }

    /// A bucket UUID is part of its directory name too: letters, digits and dashes only.
    static func isValidUUID(_ uuid: String) -> Bool {
        !uuid.isEmpty && uuid.utf8.count <= Limits.maxBucketUUIDLength
            && uuid.utf8.allSatisfy { b in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b)
                    || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(b)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) || b == UInt8(ascii: "-")
            }
    }
}

extension NodeMetadata {
    /// Checks a cluster document (or metadata file) before anything in it is used: bucket names and UUIDs
    /// (they become directory names), vBucket and replica counts (they size loops and maps), placements
    /// that match their bucket, member and user names that are printable and bounded. Throws
    /// `corruptMetadata` naming the first problem.
    func validate() throws(RegistryError) {
        func fail(_ why: String) -> RegistryError { .corruptMetadata("invalid cluster document: \(why)") }
        // Epochs and revisions are incremented and ordered: past the bounds a peer could make the next change trap
        // or a promise that refuses every config for good (`Limits.maxClusterEpoch`).
        guard ConfigStamp.isValidEpoch(revEpoch), ConfigStamp.isValidRevision(lastRev) else {
            throw fail("revision \(revEpoch).\(lastRev) outside 0...\(Limits.maxClusterEpoch)")
        }
        if let promise, !ConfigStamp.isValidEpoch(promise.epoch) {
            throw fail("promised epoch \(promise.epoch) outside 0...\(Limits.maxClusterEpoch)")
        }
        var names = Set<String>()
        for b in buckets {
            let s = b.settings
            guard ConfigStamp.isValidRevision(b.rev) else { throw fail("bucket \(s.name) rev \(b.rev)") }
            guard BucketName.isValid(s.name) else { throw fail("bucket name \(LogText.quoted(s.name))") }
            guard names.insert(s.name.lowercased()).inserted else {
                throw fail("bucket \(LogText.quoted(s.name)) listed twice")
            }
            guard BucketName.isValidUUID(s.uuid) else { throw fail("bucket \(s.name) uuid \(LogText.quoted(s.uuid))") }
            guard (1...Limits.numVBuckets).contains(s.numVBuckets) else {
                throw fail("bucket \(s.name) numVBuckets \(s.numVBuckets) outside 1...\(Limits.numVBuckets)")
            }
            guard (0...Limits.maxReplicas).contains(s.replicaNumber) else {
                throw fail("bucket \(s.name) replicaNumber \(s.replicaNumber)")
            }
            // Sizes the bucket's engine and every quota sum in bytes (`ramQuotaBytes`): past the API's bound the
            // multiplication trapped, on every node that adopted the document and again at each start.
            guard (1...Limits.maxBucketRamQuotaMB).contains(s.ramQuotaMB) else {
                throw fail("bucket \(s.name) ramQuotaMB \(s.ramQuotaMB) outside 1...\(Limits.maxBucketRamQuotaMB)")
            }
            // Ages every tombstone of the bucket (ADR 0095): a negative or NaN interval would purge them at once.
            if let days = s.purgeInterval, !Limits.purgeIntervalDays.contains(days) {
                throw fail("bucket \(s.name) purgeInterval \(days)")
            }
            if let p = b.placement {
                let range = 0..<s.numVBuckets
                guard p.chains.count == s.numVBuckets,
                    p.chains.allSatisfy({ $0.count <= Limits.maxReplicas + 1 }),
                    p.forward.allSatisfy({ range.contains($0.key) && $0.value.count <= Limits.maxReplicas + 1 }),
                    p.takeover.allSatisfy({ range.contains($0) }), p.dual.allSatisfy({ range.contains($0) })
                else { throw fail("bucket \(s.name) placement does not match its \(s.numVBuckets) vBuckets") }
                // A node holds one copy of a vBucket: a chain naming it twice breaks `VBucketMap`'s invariant.
                for (vb, chain) in p.chains.enumerated() {
                    if let n = BucketPlacement.repeatedNode(in: chain) {
                        throw fail("bucket \(s.name) vBucket \(vb) chain names \(LogText.quoted(n.rawValue)) twice")
                    }
                }
                for (vb, chain) in p.forward {
                    if let n = BucketPlacement.repeatedNode(in: chain) {
                        throw fail(
                            "bucket \(s.name) vBucket \(vb) forward chain names \(LogText.quoted(n.rawValue)) twice")
                    }
                }
            }
        }
        guard buckets.count <= Limits.maxBuckets else { throw fail("\(buckets.count) buckets") }
        guard (0...Limits.maxBucketRamQuotaMB).contains(memoryQuotaMB) else {
            throw fail("memoryQuotaMB \(memoryQuotaMB) outside 0...\(Limits.maxBucketRamQuotaMB)")
        }
        // The failure detector's timing comes from these (the API takes 5...3600 s and a count of at least 1).
        if let auto = autoFailover {
            guard (AutoFailoverSettings.minimumTimeout...AutoFailoverSettings.maximumTimeout).contains(auto.timeout),
                auto.maxCount >= 1, auto.count >= 0
            else { throw fail("autoFailover timeout \(auto.timeout), maxCount \(auto.maxCount), count \(auto.count)") }
        }
        // The compaction checks' thresholds (the API takes what `AutoCompaction.Settings.errors` accepts).
        if let auto = autoCompaction, let (field, _) = auto.errors.first {
            throw fail("autoCompaction \(field)")
        }
        let members = self.members ?? []
        guard members.count <= Limits.maxClusterMembers else { throw fail("\(members.count) members") }
        var ids = Set<NodeID>()
        for m in members {
            let n = m.node
            guard LogText.isPlainName(n.otpNode.rawValue, maxLength: Limits.maxNodeNameLength),
                LogText.isPlainName(n.host, maxLength: Limits.maxNodeNameLength)
            else { throw fail("member name \(LogText.quoted(n.otpNode.rawValue))") }
            let ports =
                [n.adminPort, n.kvPort, n.viewsPort] + [n.kvTLSPort, n.adminTLSPort, n.viewsTLSPort].compactMap { $0 }
            guard ports.allSatisfy({ (0...65535).contains($0) }) else {
                throw fail("member \(n.otpNode) port out of range")
            }
            guard ids.insert(n.otpNode).inserted else { throw fail("member \(n.otpNode) listed twice") }
        }
        let cas = self.trustedCAs ?? []
        guard cas.count <= Limits.maxTrustedCAs else { throw fail("\(cas.count) trusted CAs") }
        for ca in cas {
            // The certificate itself is parsed where it is used (SetteeTLS: this layer links no X.509 parser); here
            // its size and shape, so a peer's document cannot make every node parse megabytes.
            guard ca.pem.utf8.count <= Limits.maxTrustedCAPEMBytes, ca.pem.hasPrefix("-----BEGIN CERTIFICATE-----"),
                LogText.isPlainName(ca.subject, maxLength: Limits.maxTrustedCAPEMBytes),
                ca.loadFile.utf8.count <= Limits.maxTrustedCAPEMBytes
            else { throw fail("trusted CA \(ca.id)") }
        }
        let users = self.users ?? []
        guard users.count <= Limits.maxLocalUsers else { throw fail("\(users.count) users") }
        for u in users where !LogText.isPlainName(u.name, maxLength: Limits.maxPrincipalNameLength) {
            throw fail("user name \(LogText.quoted(u.name))")
        }
    }
}

extension NodeRegistry {
    /// Whether `username`/`password` are credentials the cluster document `bytes` itself holds: its internal
    /// secret (user `internalUsername`) or its admin's password. An uninitialised node has no credentials of
    /// its own, so before it joins it asks the caller to prove it knows the cluster's: a passer-by can no
    /// longer make it adopt a document (and create buckets) without knowing a secret of that document.
    /// Blocking (PBKDF2): call it off the event loop.
    public static func joinCredentialsMatch(document bytes: [UInt8], username: String, password: String) -> Bool {
        guard let document = try? decodeDocument(bytes) else { return false }
        if username == internalUsername {
            guard let secret = document.internalSecret, !secret.isEmpty else { return false }
            return constantTimeEqual(
                ScramHash.sha256.hash(Array(password.utf8)), ScramHash.sha256.hash(Array(secret.utf8)))
        }
        return document.admin?.verify(username: username, password: password) ?? false
    }
}
