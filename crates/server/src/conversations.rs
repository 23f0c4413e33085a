//! The OpenAI Conversations API: `POST /v1/conversations` (with its first `items` and
//! `metadata`), `GET`, `POST` (new `metadata`) and `DELETE /v1/conversations/{id}`, and its
//! items: `GET` (a page at a time, as `input_items` lists) and `POST
//! /v1/conversations/{id}/items`, `GET` and `DELETE /v1/conversations/{id}/items/{item_id}`.
//! A Responses API request names a conversation in `conversation`: its items come before the
//! request's input, and once the response is done its input and output items are added
//! ([`crate::responses`]). Conversations live in the response store
//! ([`crate::response_store`]): bounded with the stored responses, and kept in its folder
//! across restarts.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{parse_json, ApiError, ErrorKind};
use crate::openai::wire::{new_id, now};
use crate::openai::OpenAiError;
use crate::response_store::{ResponseStore, StoreError};
use crate::responses::{list_page, normalized_items, store, stored, template_messages};
use crate::state::AppState;

type Result<T> = std::result::Result<T, OpenAiError>;

pub fn routes() -> Router<Arc<AppState>> {
    let mut r = Router::new();
    for base in ["/v1/conversations", "/conversations"] {
        r = r
            .route(base, post(create))
            .route(
                &format!("{base}/{{id}}"),
                get(retrieve).post(update).delete(delete),
            )
            .route(
                &format!("{base}/{{id}}/items"),
                get(list_items).post(add_items),
            )
            .route(
                &format!("{base}/{{id}}/items/{{item_id}}"),
                get(item).delete(delete_item),
            );
    }
    r
}

/// What OpenAI allows in `metadata`, which clients may rely on.
const METADATA_KEYS: usize = 16;
const METADATA_KEY_CHARS: usize = 64;
const METADATA_VALUE_CHARS: usize = 512;

#[derive(Debug, Deserialize)]
struct CreateRequest {
    items: Option<Vec<Value>>,
    metadata: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct UpdateRequest {
    metadata: Value,
}

#[derive(Debug, Deserialize)]
struct AddItemsRequest {
    items: Vec<Value>,
}

/// `metadata` as kept: up to 16 string values under keys of at most 64 characters, each at
/// most 512; none is `{}`.
fn metadata(m: Option<&Value>) -> std::result::Result<Value, ApiError> {
    let m = match m {
        None | Some(Value::Null) => return Ok(json!({})),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(ApiError::bad_request(
                "`metadata` must be an object of strings",
            ))
        }
    };
    if m.len() > METADATA_KEYS {
        return Err(ApiError::bad_request(format!(
            "`metadata` has {} keys: at most {METADATA_KEYS}",
            m.len()
        )));
    }
    for (k, v) in m {
        let fits = v
            .as_str()
            .is_some_and(|v| v.chars().count() <= METADATA_VALUE_CHARS);
        if k.chars().count() > METADATA_KEY_CHARS || !fits {
            return Err(ApiError::bad_request(format!(
                "`metadata.{k}`: keys are at most {METADATA_KEY_CHARS} characters, and values strings of at most {METADATA_VALUE_CHARS}"
            )));
        }
    }
    Ok(Value::Object(m.clone()))
}

/// Items a client adds, checked as a response's input is (each must be one the model can
/// be shown), with ids.
fn checked_items(items: Vec<Value>) -> std::result::Result<Vec<Value>, ApiError> {
    template_messages(None, &items, "items")?;
    Ok(normalized_items(items))
}

/// Keep conversation `object` with `items` in `store`, or say why it cannot be.
fn put(store: &mut ResponseStore, object: Value, items: Vec<Value>) -> Result<()> {
    if !store.enabled() {
        return Err(ApiError::bad_request(
            "conversations are kept in the response store, and this server keeps none (serve --responses-store-mb 0): send the whole conversation in `input`",
        )
        .into());
    }
    if !store.put_conversation(object, items) {
        return Err(ApiError::bad_request(
            "the conversation would be larger than the whole response store: start the server with a larger --responses-store-mb, or start a new conversation",
        )
        .into());
    }
    Ok(())
}

/// `POST /v1/conversations`.
async fn create(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let req: CreateRequest = parse_json(body)?;
    let items = checked_items(req.items.unwrap_or_default())?;
    let object = json!({"id": new_id("conv"), "object": "conversation", "created_at": now(),
                        "metadata": metadata(req.metadata.as_ref())?});
    put(&mut *store(&state)?, object.clone(), items)?;
    Ok(Json(object))
}

/// `GET /v1/conversations/{id}`.
async fn retrieve(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    let (object, _) = stored(store(&state)?.conversation_items(&id))?;
    Ok(Json(object))
}

/// `POST /v1/conversations/{id}`: its `metadata` replaced.
async fn update(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let req: UpdateRequest = parse_json(body)?;
    let metadata = metadata(Some(&req.metadata))?;
    let mut store = store(&state)?;
    let (mut object, items) = stored(store.conversation_items(&id))?;
    object["metadata"] = metadata;
    put(&mut store, object.clone(), items)?;
    Ok(Json(object))
}

/// `DELETE /v1/conversations/{id}`: the conversation and its items (the responses made in
/// it stay).
async fn delete(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>> {
    if !store(&state)?.delete_conversation(&id) {
        stored::<()>(Err(StoreError::NoConversation(id.clone())))?;
    }
    Ok(Json(
        json!({"id": id, "object": "conversation.deleted", "deleted": true}),
    ))
}

/// `GET /v1/conversations/{id}/items`: a page (`limit`, 20 by default; `order`, `desc`
/// newest first by default; `after` an item's id).
async fn list_items(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>> {
    let (_, items) = stored(store(&state)?.conversation_items(&id))?;
    Ok(Json(list_page(items, &q)?))
}

/// `POST /v1/conversations/{id}/items`: the items added, as a list.
async fn add_items(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Json<Value>> {
    let req: AddItemsRequest = parse_json(body)?;
    let added = checked_items(req.items)?;
    let mut store = store(&state)?;
    let (object, mut items) = stored(store.conversation_items(&id))?;
    items.extend(added.iter().cloned());
    put(&mut store, object, items)?;
    let first = added.first().and_then(|i| i.get("id")).cloned();
    let last = added.last().and_then(|i| i.get("id")).cloned();
    Ok(Json(
        json!({"object": "list", "data": added, "first_id": first, "last_id": last, "has_more": false}),
    ))
}

fn no_item(id: &str, item_id: &str) -> OpenAiError {
    ApiError::new(
        ErrorKind::NotFound,
        format!("conversation `{id}` has no item `{item_id}`"),
    )
    .into()
}

/// `GET /v1/conversations/{id}/items/{item_id}`.
async fn item(
    State(state): State<Arc<AppState>>,
    Path((id, item_id)): Path<(String, String)>,
) -> Result<Json<Value>> {
    let (_, items) = stored(store(&state)?.conversation_items(&id))?;
    items
        .into_iter()
        .find(|i| i.get("id").and_then(Value::as_str) == Some(item_id.as_str()))
        .map(Json)
        .ok_or_else(|| no_item(&id, &item_id))
}

/// `DELETE /v1/conversations/{id}/items/{item_id}`: the conversation without it.
async fn delete_item(
    State(state): State<Arc<AppState>>,
    Path((id, item_id)): Path<(String, String)>,
) -> Result<Json<Value>> {
    let mut store = store(&state)?;
    let (object, mut items) = stored(store.conversation_items(&id))?;
    let before = items.len();
    items.retain(|i| i.get("id").and_then(Value::as_str) != Some(item_id.as_str()));
    if items.len() == before {
        return Err(no_item(&id, &item_id));
    }
    put(&mut store, object.clone(), items)?;
    Ok(Json(object))
}

/// Add a finished response's `input` and `output` items to conversation `id`. A
/// conversation deleted meanwhile, or grown past the store, is said and left as it was.
pub(crate) fn add_response(state: &AppState, id: &str, input: &[Value], output: &[Value]) {
    let Ok(mut store) = state.responses.lock() else {
        return;
    };
    let (object, mut items) = match store.conversation_items(id) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("a response's items were not added to its conversation: {e}");
            return;
        }
    };
    items.extend(input.iter().cloned());
    items.extend(output.iter().cloned());
    if !store.put_conversation(object, items) {
        tracing::warn!(
            "conversation {id} would be larger than the whole response store (--responses-store-mb): its latest response was not added"
        );
    }
}
