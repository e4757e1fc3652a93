-- CairnQ storage, first shape (PostgreSQL). Names are never schema-qualified:
-- the connection's search_path decides where the installation lives.
-- Constraints stay inline and unnamed so PostgreSQL generates the same names
-- (cairnq_tasks_pkey, cairnq_tasks_status_check, ...) as every other SDK.
create table if not exists cairnq_tasks (
    id text primary key,
    name text not null,
    queue text not null default 'default',
    status text not null check (status in ('queued', 'running', 'succeeded', 'failed', 'canceled')),
    payload jsonb not null,
    result jsonb,
    error jsonb,
    metadata jsonb not null default '{}'::jsonb,
    progress double precision,
    message text,
    attempt integer not null default 0,
    max_attempts integer not null default 3,
    priority integer not null default 0,
    worker_id text,
    lease_until_ms bigint,
    run_at_ms bigint not null,
    cancel_requested_at_ms bigint,
    parent_id text,
    root_id text,
    correlation_id text,
    created_at_ms bigint not null,
    updated_at_ms bigint not null,
    completed_at_ms bigint
);

-- First claim-order index; 0008 rebuilds it with run_at_ms and id.
create index if not exists cairnq_tasks_claim_idx
    on cairnq_tasks (queue, status, priority desc, created_at_ms);
-- Dropped again by 0010.
create index if not exists cairnq_tasks_status_idx on cairnq_tasks (status);
create index if not exists cairnq_tasks_name_idx on cairnq_tasks (name);
create index if not exists cairnq_tasks_root_idx on cairnq_tasks (root_id);
create index if not exists cairnq_tasks_correlation_idx on cairnq_tasks (correlation_id);

-- One row per business key, pointing at the task the key currently names.
create table if not exists cairnq_task_keys (
    key text primary key,
    task_id text not null references cairnq_tasks (id) on delete cascade,
    created_at_ms bigint not null,
    updated_at_ms bigint not null
);

create table if not exists cairnq_meta (
    key text primary key,
    value text not null
);

insert into cairnq_meta (key, value) values ('protocol_version', '1')
    on conflict (key) do nothing;
insert into cairnq_meta (key, value) values ('schema_version', '1')
    on conflict (key) do nothing;
