import Foundation
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Synchronization
import Testing

@Suite struct NodeRegistryTests {
    /// Proves a new data dir starts uninitialised, and that after `initialize` only the right pair authenticates.
    @Test func credentialsLifecycle() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        #expect(!r.isInitialized)
        #expect(!r.checkAdmin(username: "admin", password: "password"))
        try r.initialize(username: "admin", password: "password")
        #expect(r.isInitialized)
        #expect(r.checkAdmin(username: "admin", password: "password"))
        #expect(r.checkAdmin(username: "admin", password: "password"))  // cached path
        #expect(!r.checkAdmin(username: "admin", password: "passwore"))
        #expect(!r.checkAdmin(username: "admim", password: "password"))
        #expect(r.authenticate(username: "admin", password: "password") == .admin)
        #expect(r.authenticate(username: "admin", password: "nope!!") == nil)
        // Replacing the credentials invalidates the old ones, cache included.
        try r.initialize(username: "root", password: "secret-2")
        #expect(!r.checkAdmin(username: "admin", password: "password"))
        #expect(r.checkAdmin(username: "root", password: "secret-2"))
        r.shutdown()
    }

    /// Proves a node that leaves the cluster (ejected) forgets the cluster's users with its admin and secret: it kept
    /// every user's salted SCRAM keys, and whoever initialised it next (its setup endpoints are open) could read them
    /// back from its cluster document.
    @Test func leavingTheClusterForgetsItsUsers() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        try r.initialize(username: "admin", password: "password")
        try r.upsertUser(name: "ops", fullName: "", password: "ops-password", roles: [])
        #expect(r.localUsers.map(\.name) == ["ops"])
        try r.leaveCluster()
        #expect(r.localUsers.isEmpty && r.localUser(named: "ops") == nil)
        #expect(r.authenticate(username: "ops", password: "ops-password") == nil)
        #expect(!r.isInitialized)
        r.shutdown()
    }

    /// Proves unusable credentials are refused with Couchbase's password rule.
    @Test func shortPasswordRefused() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        #expect(throws: RegistryError.invalidCredentials("The password must be at least 6 characters long.")) {
            try r.initialize(username: "admin", password: "12345")
        }
        #expect(throws: RegistryError.self) { try r.initialize(username: "", password: "123456") }
        #expect(!r.isInitialized)
    }

    /// Proves the metadata file never holds the password in clear, and carries SCRAM keys for three hashes.
    @Test func passwordNotStoredInClear() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        try r.initialize(username: "admin", password: "hunter2-very-secret")
        let text = try String(contentsOfFile: dir.path + "/node-metadata.json", encoding: .utf8)
        #expect(!text.contains("hunter2"))
        #expect(text.contains("SHA512") && text.contains("SHA256") && text.contains("SHA1"))
        for algorithm in ScramHash.allCases {
            let c = try #require(r.scramCredential(username: "admin", hash: algorithm))
            #expect(c.iterations >= 4096)
            #expect(c.storedKey.count == algorithm.digestLength)
            let again = ScramKeys.derive(
                password: "hunter2-very-secret", salt: c.salt, iterations: c.iterations, hash: algorithm)
            #expect(again == c)
        }
        #expect(r.scramCredential(username: "other", hash: .sha512) == nil)
        r.shutdown()
    }

    /// Proves create → lookup → config, that revisions grow per change, and that duplicates are refused.
    @Test func createBucketPublishesConfig() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        let g0 = r.globalConfigRevision
        try r.createBucket(settings("beer"))
        #expect(r.bucket(named: "beer") != nil)
        #expect(r.bucketSettings(named: "beer")?.name == "beer")
        #expect(r.bucketNames == ["beer"])
        #expect(FileManager.default.fileExists(atPath: r.directory(for: settings("beer"))))
        let rev1 = try #require(r.configRevision(bucket: "beer"))
        #expect(r.globalConfigRevision > g0)
        let json = try #require(try jsonObject(r.terseConfigJSON(bucket: "beer") ?? []))
        #expect(json["name"] as? String == "beer")
        #expect(json["rev"] as? Int == Int(rev1.rev))
        let vbsm = try #require(json["vBucketServerMap"] as? [String: Any])
        #expect(vbsm["serverList"] as? [String] == ["$HOST:12000"])
        #expect((vbsm["vBucketMap"] as? [[Int]])?.count == 1024)
        let global = try #require(try jsonObject(r.globalConfigJSON()))
        #expect((global["nodesExt"] as? [[String: Any]])?.first?["hostname"] as? String == "$HOST")

        try r.createBucket(settings("wine"))
        let rev2 = try #require(r.configRevision(bucket: "wine"))
        #expect(rev2 > rev1)
        #expect(r.bucketNames == ["beer", "wine"])
        #expect(throws: RegistryError.alreadyExists) { try r.createBucket(settings("beer")) }
        #expect(r.terseConfigJSON(bucket: "nope") == nil)
        #expect(r.configRevision(bucket: "nope") == nil)
        r.shutdown()
    }

    /// Proves concurrent creates of one name yield exactly one bucket, while concurrent readers keep working.
    @Test func concurrentCreatesOfOneName() async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        let outcomes = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<8 {
                group.addTask { (try? r.createBucket(settings("race", vbuckets: 64))) != nil }
            }
            group.addTask {
                for _ in 0..<200 {
                    _ = r.terseConfigJSON(bucket: "race")
                    _ = r.bucket(named: "race")
                }
                return false
            }
            var results: [Bool] = []
            for await ok in group { results.append(ok) }
            return results
        }
        #expect(outcomes.filter { $0 }.count == 1)
        #expect(r.bucketNames == ["race"])
        #expect(r.bucket(named: "race") != nil)
        r.shutdown()
    }

    /// Proves the 31st bucket is refused with `.tooMany`.
    @Test func bucketLimit() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        for i in 0..<Limits.maxBuckets { try r.createBucket(settings("b\(i)", vbuckets: 16)) }
        #expect(throws: RegistryError.tooMany) { try r.createBucket(settings("one-more", vbuckets: 16)) }
        #expect(r.bucketNames.count == Limits.maxBuckets)
        r.shutdown()
    }

    /// Proves delete removes the engine, files and config, refuses unknown names, and a re-created bucket gets a newer rev.
    @Test func deleteBucket() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        try r.createBucket(settings("beer"))
        let rev1 = try #require(r.configRevision(bucket: "beer"))
        try r.deleteBucket(named: "beer")
        #expect(r.bucket(named: "beer") == nil)
        #expect(r.bucketSettings(named: "beer") == nil)
        #expect(r.terseConfigJSON(bucket: "beer") == nil)
        #expect(!FileManager.default.fileExists(atPath: r.directory(for: settings("beer"))))
        #expect(throws: RegistryError.notFound) { try r.deleteBucket(named: "beer") }
        try r.createBucket(settings("beer"))
        #expect(try #require(r.configRevision(bucket: "beer")) > rev1)
        r.shutdown()
    }

    /// Proves flush empties an enabled bucket and is refused for a disabled or unknown one.
    @Test func flushBucket() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        try r.createBucket(settings("open", flush: true))
        try r.createBucket(settings("closed", flush: false))
        let key = Array("k".utf8)
        let vb = VBucketHash.vbucket(forKey: key)
        let engine = try #require(r.bucket(named: "open"))
        _ = try engine.store(.set, vb, key, value: Array("1".utf8), flags: 0, expiry: 0, datatype: .json, cas: .zero)
        #expect(throws: RegistryError.flushDisabled) { try r.flushBucket(named: "closed") }
        #expect(throws: RegistryError.notFound) { try r.flushBucket(named: "nope") }
        try r.flushBucket(named: "open")
        #expect(throws: EngineError.keyNotFound) { try engine.get(vb, key) }
        r.shutdown()
    }

    /// Proves buckets, credentials, cluster settings and revisions survive a restart on the same data dir.
    @Test func restartPersistence() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let first = try makeRegistry(dir)
        try first.initialize(username: "admin", password: "password")
        try first.updateClusterSettings(clusterName: "prod", memoryQuotaMB: 1024)
        try first.createBucket(settings("beer", flush: true))
        let rev = try #require(first.configRevision(bucket: "beer"))
        let nodeUUID = first.node.nodeUUID
        let clusterUUID = first.clusterIdentity.uuid
        first.shutdown()
        #expect(first.bucket(named: "beer") == nil)

        let second = try makeRegistry(dir)
        #expect(second.isInitialized)
        #expect(second.checkAdmin(username: "admin", password: "password"))
        #expect(!second.checkAdmin(username: "admin", password: "wrong-password"))
        #expect(second.bucketNames == ["beer"])
        #expect(second.bucket(named: "beer") != nil)
        #expect(second.bucketSettings(named: "beer") == settings("beer", flush: true))
        #expect(second.configRevision(bucket: "beer") == rev)
        #expect(second.node.nodeUUID == nodeUUID && nodeUUID.count == 32)
        #expect(second.clusterIdentity == ClusterIdentity(uuid: clusterUUID, name: "prod"))
        #expect(second.memoryQuotaMB == 1024)
        try second.createBucket(settings("wine"))
        #expect(try #require(second.configRevision(bucket: "wine")) > rev)
        second.shutdown()
    }

    /// Proves a data directory is exclusive while a registry holds it, and free again after `shutdown()`,
    /// after which the old registry refuses changes.
    @Test func dataDirectoryIsExclusive() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let first = try makeRegistry(dir)
        #expect(throws: RegistryError.dataDirectoryInUse(dir.path)) { _ = try makeRegistry(dir) }
        first.shutdown()
        first.shutdown()  // idempotent
        #expect(throws: RegistryError.shutDown) { try first.createBucket(settings("late")) }
        #expect(throws: RegistryError.shutDown) { try first.initialize(username: "a", password: "password") }
        let second = try makeRegistry(dir)
        #expect(second.bucketNames.isEmpty)
        second.shutdown()
    }

    /// Proves a damaged metadata file stops the start with `.corruptMetadata` instead of forgetting buckets.
    @Test func corruptMetadataRefused() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        try r.createBucket(settings("beer"))
        r.shutdown()
        let path = dir.path + "/node-metadata.json"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        text = text.replacingOccurrences(of: "beer", with: "bEEr")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        #expect {
            _ = try makeRegistry(dir)
        } throws: { error in
            if case RegistryError.corruptMetadata = error { return true }
            return false
        }
        // Also proves a failed start releases the directory lock: the next attempt reaches the metadata again.
        try "{not json".write(toFile: path, atomically: true, encoding: .utf8)
        #expect {
            _ = try makeRegistry(dir)
        } throws: { error in
            if case RegistryError.corruptMetadata = error { return true }
            return false
        }
    }

    /// Proves data is never deleted on a guess: a bucket directory the metadata does not list is left in
    /// place unless it carries the deletion marker (an interrupted delete), which start-up finishes; and a
    /// missing metadata file next to bucket directories stops the start with `.metadataMissing` (it used to
    /// remove every bucket directory as a leftover), writing no new metadata and deleting nothing.
    @Test func orphanDirectoriesKeptUnlessMarkedDeleted() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        try r.createBucket(settings("beer"))
        r.shutdown()
        let orphan = dir.path + "/buckets/ghost-00000000000000000000000000000000"
        try FileManager.default.createDirectory(atPath: orphan, withIntermediateDirectories: true)
        let deleted = dir.path + "/buckets/gone-11111111111111111111111111111111"
        try FileManager.default.createDirectory(atPath: deleted, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: deleted + "/" + NodeRegistry.deletedMarker, contents: Data())
        let again = try makeRegistry(dir)
        #expect(FileManager.default.fileExists(atPath: orphan))
        #expect(!FileManager.default.fileExists(atPath: deleted))
        #expect(FileManager.default.fileExists(atPath: again.directory(for: settings("beer"))))
        again.shutdown()

        let metadata = dir.path + "/node-metadata.json"
        try FileManager.default.removeItem(atPath: metadata)
        #expect {
            _ = try makeRegistry(dir)
        } throws: { error in
            if case RegistryError.metadataMissing(let m) = error { return m.contains("node-metadata.json") }
            return false
        }
        #expect(!FileManager.default.fileExists(atPath: metadata))
        #expect(FileManager.default.fileExists(atPath: again.directory(for: settings("beer"))))
        #expect(FileManager.default.fileExists(atPath: orphan))
    }

    /// Proves the unauthenticated default is the single authType=none bucket, and only when it is unique.
    @Test func defaultUnauthenticatedBucket() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        #expect(r.defaultUnauthenticatedBucket() == nil)
        try r.createBucket(settings("secure"))
        #expect(r.defaultUnauthenticatedBucket() == nil)
        try r.createBucket(settings("open1", auth: .none))
        #expect(r.defaultUnauthenticatedBucket() == "open1")
        try r.createBucket(settings("open2", auth: .none))
        #expect(r.defaultUnauthenticatedBucket() == nil)
        r.shutdown()
    }

    /// Proves a cluster rename bumps every bucket's config revision (configs carry `clusterName`).
    @Test func clusterRenameBumpsRevisions() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        try r.createBucket(settings("beer"))
        let before = try #require(r.configRevision(bucket: "beer"))
        try r.updateClusterSettings(clusterName: "renamed")
        #expect(try #require(r.configRevision(bucket: "beer")) > before)
        let json = try #require(try jsonObject(r.terseConfigJSON(bucket: "beer") ?? []))
        #expect(json["clusterName"] as? String == "renamed")
        r.shutdown()
    }
}

final class ChangeLog: Sendable {
    let events = Mutex<[String?]>([])
}

@Suite struct ConfigObserverTests {
    /// Proves observers hear every config change (create, delete, rename) and stop hearing once removed.
    @Test func observersSeeChanges() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        let log = ChangeLog()
        let token = r.addConfigObserver { bucket in log.events.withLock { $0.append(bucket) } }
        try r.createBucket(settings("beer"))
        try r.updateClusterSettings(clusterName: "renamed")
        try r.updateClusterSettings(memoryQuotaMB: 512)  // no config change: no event
        try r.deleteBucket(named: "beer")
        #expect(log.events.withLock { $0 } == ["beer", nil, "beer"])
        r.removeConfigObserver(token)
        try r.createBucket(settings("wine"))
        #expect(log.events.withLock { $0 }.count == 3)
        r.shutdown()
    }
}

@Suite struct PBKDF2Tests {
    /// Proves PBKDF2-HMAC-SHA1 matches RFC 6070's vectors.
    @Test func rfc6070() {
        let p = Array("password".utf8), s = Array("salt".utf8)
        #expect(
            hex(ScramHash.sha1.pbkdf2(password: p, salt: s, iterations: 1))
                == "0c60c80f961f0e71f3a9b524af6012062fe037a6")
        #expect(
            hex(ScramHash.sha1.pbkdf2(password: p, salt: s, iterations: 4096))
                == "4b007901b765489abead49d926f721d065a429c1")
    }

    /// Proves PBKDF2-HMAC-SHA256/512 match independent values (Python hashlib), multi-block output included.
    @Test func sha2Vectors() {
        let p = Array("password".utf8), s = Array("salt".utf8)
        #expect(
            hex(ScramHash.sha256.pbkdf2(password: p, salt: s, iterations: 1))
                == "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b")
        #expect(
            hex(ScramHash.sha256.pbkdf2(password: p, salt: s, iterations: 4096))
                == "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a")
        #expect(
            hex(
                ScramHash.sha256.pbkdf2(
                    password: Array("passwordPASSWORDpassword".utf8),
                    salt: Array("saltSALTsaltSALTsaltSALTsaltSALTsalt".utf8), iterations: 4096, length: 40))
                == "348c89dbcbd32b2f32d814b8116e84cf2b17347ebc1800181c4e2a1fb8dd53e1c635518c7dac47e9")
        #expect(
            hex(ScramHash.sha512.pbkdf2(password: p, salt: s, iterations: 2))
                == "e1d9c16aa681708a45f5c7c4e215ceb66e011a2e9f0040713f18aefdb866d53cf76cab2868a39b9f7840edce4fef5a82be67335c77a6068e04112754f27ccf4e"
        )
    }

    /// Proves SCRAM keys for RFC 7677's example user (pencil, salt W22Z…, 4096) match independently computed ones.
    @Test func scramSha256Keys() throws {
        let salt = try #require(Data(base64Encoded: "W22ZaJ0SNY7soEsUEjb6gQ=="))
        let c = ScramKeys.derive(password: "pencil", salt: Array(salt), iterations: 4096, hash: .sha256)
        #expect(Data(c.storedKey).base64EncodedString() == "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=")
        #expect(Data(c.serverKey).base64EncodedString() == "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=")
    }
}
