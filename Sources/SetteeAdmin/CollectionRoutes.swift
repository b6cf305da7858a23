import Hummingbird
import Logging
import SetteeAuth
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteeRegistry

/// The collections REST API of ns_server (Couchbase Server 7), which the SDKs' collection managers call (ADR 0129):
///
/// - `GET /pools/default/buckets/B/scopes`: the manifest (`CollectionsManifest.json`), to a local user only the
///   scopes and collections its roles reach (ADR 0141).
/// - `POST .../scopes` (form `name`), `DELETE .../scopes/S`, `POST .../scopes/S/collections` (form `name`, optional
///   `maxTTL` seconds), `DELETE .../scopes/S/collections/C`: 200 `{"uid":"<new manifest uid, hex>"}`.
///
/// Edits go to the orchestrator and are committed through the majority claim like any bucket edit
/// (`AdminAPI.configChange`), then published. Refusals use ns_server's texts, which the SDK matches: 400 "Scope with
/// name ... already exists" / "Collection with name ... already exists" / a field error for a bad name, 404 "Scope
/// with name ... is not found" / "Collection with name ... is not found", 404 for an unknown bucket.
enum CollectionRoutes {
    static func add(to router: Router<AdminRequestContext>, api: AdminAPI) {
        router.get("/pools/default/buckets/:name/scopes") { _, c in
            guard let name = bucketParameter(c), let manifest = api.registry.collectionsManifest(bucket: name) else {
                return notFound
            }
            // A local user sees only the scopes and collections it holds a privilege in (ADR 0141).
            guard let roles = CallerRoles.roles else { return AdminResponses.bytes(.ok, manifest.json) }
            return AdminResponses.bytes(
                .ok,
                manifest.json(
                    showingScope: { roles.sees(bucket: name, scope: $0) },
                    collection: { roles.sees(bucket: name, scope: $0, collection: $1) }))
        }
        router.post("/pools/default/buckets/:name/scopes") { r, c in
            await api.editCollections(
                r, bucket: bucketParameter(c), audited: .scopeCreated, names: { form in (form["name"] ?? "", nil) }
            ) { form, manifest in
                guard let scope = form["name"] else { throw EditRefusal.field("name", "The value must be supplied") }
                try refusing { () throws(CollectionsManifest.EditError) in try manifest.createScope(scope) }
            }
        }
        router.delete("/pools/default/buckets/:name/scopes/:scope") { r, c in
            let scope = pathParameter(c, "scope")
            return await api.editCollections(
                r, bucket: bucketParameter(c), readsForm: false, audited: .scopeDropped, names: { _ in (scope, nil) }
            ) { _, manifest in
                try refusing { () throws(CollectionsManifest.EditError) in try manifest.dropScope(scope) }
            }
        }
        router.post("/pools/default/buckets/:name/scopes/:scope/collections") { r, c in
            let scope = pathParameter(c, "scope")
            return await api.editCollections(
                r, bucket: bucketParameter(c), audited: .collectionCreated, names: { form in (scope, form["name"]) }
            ) { form, manifest in
                guard let collection = form["name"] else {
                    throw EditRefusal.field("name", "The value must be supplied")
                }
                var maxTTL: UInt32 = 0
                if let text = form["maxTTL"] {
                    guard let value = UInt32(text), value <= Limits.maxCollectionMaxTTLSeconds else {
                        throw EditRefusal.field("maxTTL", "The value must be an integer between 0 and 2147483647")
                    }
                    maxTTL = value
                }
                try refusing { () throws(CollectionsManifest.EditError) in
                    try manifest.createCollection(collection, inScope: scope, maxTTL: maxTTL)
                }
            }
        }
        router.delete("/pools/default/buckets/:name/scopes/:scope/collections/:collection") { r, c in
            let scope = pathParameter(c, "scope")
            let collection = pathParameter(c, "collection")
            return await api.editCollections(
                r, bucket: bucketParameter(c), readsForm: false, audited: .collectionDropped,
                names: { _ in (scope, collection) }
            ) { _, manifest in
                try refusing { () throws(CollectionsManifest.EditError) in
                    try manifest.dropCollection(collection, inScope: scope)
                }
            }
        }
    }

    static var notFound: Response { AdminResponses.text(.notFound, "Requested resource not found.\r\n") }

    /// A path parameter, percent-decoded ("" when absent, which no name matches).
    static func pathParameter(_ context: AdminRequestContext, _ key: String) -> String {
        context.parameters.get(key).map(PercentEncoding.decodeOrKeep) ?? ""
    }

    /// Runs a manifest edit, turning its refusal into the answer ns_server gives.
    static func refusing(_ edit: () throws(CollectionsManifest.EditError) -> Void) throws(EditRefusal) {
        do { try edit() } catch { throw EditRefusal.manifest(error) }
    }

    /// Why a collections edit was refused: a form field, or the manifest's rule.
    enum EditRefusal: Error {
        case field(String, String)
        case manifest(CollectionsManifest.EditError)

        var response: Response {
            switch self {
            case .field(let name, let message): return AdminResponses.fieldErrors([(name, message)])
            case .manifest(let error):
                switch error {
                case .invalidName(let name):
                    return AdminResponses.fieldErrors([
                        (
                            "name",
                            "Name \(LogText.quoted(name)) must be 1 to \(Limits.maxCollectionNameLength) characters "
                                + "of A-Z, a-z, 0-9, _, - and %, and may not start with _ or %"
                        )
                    ])
                case .scopeExists(let scope):
                    return AdminResponses.fieldErrors([("_", "Scope with name \"\(scope)\" already exists")])
                case .collectionExists(let scope, let collection):
                    return AdminResponses.fieldErrors([
                        ("_", "Collection with name \"\(collection)\" in scope \"\(scope)\" already exists")
                    ])
                case .scopeNotFound(let scope):
                    return AdminResponses.json(
                        .notFound, ["errors": ["_": .string("Scope with name \"\(scope)\" is not found")]])
                case .collectionNotFound(let scope, let collection):
                    return AdminResponses.json(
                        .notFound,
                        [
                            "errors": [
                                "_": .string(
                                    "Collection with name \"\(collection)\" in scope \"\(scope)\" is not found")
                            ]
                        ])
                case .cannotDropDefault:
                    return AdminResponses.fieldErrors([("_", "Deleting _default scope or collection is not allowed")])
                case .tooManyScopes:
                    return AdminResponses.fieldErrors([
                        ("_", "Maximum number of scopes has been reached (\(Limits.maxScopesPerBucket))")
                    ])
                case .tooManyCollections:
                    return AdminResponses.fieldErrors([
                        ("_", "Maximum number of collections has been reached (\(Limits.maxCollectionsPerBucket))")
                    ])
                case .invalidMaxTTL:
                    return AdminResponses.fieldErrors([
                        ("maxTTL", "The value must be an integer between 0 and 2147483647")
                    ])
                case .exhausted:
                    return AdminResponses.general(.badRequest, "The bucket's collection ids are exhausted")
                }
            }
        }
    }
}

extension AdminAPI {
    /// Reads the form (unless `readsForm` is false), applies `edit` to bucket `name`'s manifest through the majority
    /// claim, publishes, and answers `{"uid":"<hex>"}`; `edit` refuses by throwing a `CollectionRoutes.EditRefusal`,
    /// answered as it renders. A change made is audited as `audited`, naming the scope and collection `names` reads.
    func editCollections(
        _ request: Request, bucket name: String?, readsForm: Bool = true, audited: AuditEvent.Kind,
        names: @Sendable (FormBody) -> (scope: String, collection: String?),
        _ edit: @escaping @Sendable (FormBody, inout CollectionsManifest) throws -> Void
    ) async -> Response {
        if let forwarded = await forwardToOrchestrator(request) { return forwarded }
        guard let name, registry.bucketSettings(named: name) != nil else { return CollectionRoutes.notFound }
        var form = FormBody(fields: [:])
        if readsForm {
            switch await self.form(request) {
            case .success(let f): form = f
            case .failure(let e): return e.response
            }
        }
        let fields = form
        let registry = self.registry
        let manifest: CollectionsManifest
        do {
            manifest = try await configChange { claim in
                try registry.editCollections(bucket: name, claim: claim) { manifest in try edit(fields, &manifest) }
            }
        } catch let refusal as CollectionRoutes.EditRefusal {
            return refusal.response
        } catch let refused as ClusterRequestError {
            return Self.refusal(refused)
        } catch RegistryError.notFound {
            return CollectionRoutes.notFound
        } catch {
            logger.error("collections edit failed", metadata: ["bucket": "\(name)", "error": "\(error)"])
            return AdminResponses.general(.internalServerError, "The collections edit failed: \(error)")
        }
        let (scope, collection) = names(fields)
        var auditFields: [(String, JSON)] = [("bucket_name", .string(name)), ("scope_name", .string(scope))]
        if let collection { auditFields.append(("collection_name", .string(collection))) }
        auditFields.append(("manifest_uid", .string(manifest.uidHex)))
        audit(audited, auditFields)
        await publish()
        return AdminResponses.json(.ok, ["uid": .string(manifest.uidHex)])
    }
}
