-- Push wakeups for every writer, whatever SDK it speaks: a task becoming
-- claimable announces its queue on cairnq_queued, and a task reaching a
-- terminal state announces its id on cairnq_done. Claims (-> running) are
-- filtered out by the trigger's WHEN clause, so the hottest write stays silent.
-- Predates the schema_version rule: leaves schema_version at '2'.
create or replace function cairnq_notify() returns trigger
language plpgsql
as $$
begin
    if new.status = 'queued'
       and (tg_op = 'INSERT' or old.status is distinct from new.status) then
        perform pg_notify('cairnq_queued', new.queue);
    elsif tg_op = 'UPDATE'
       and new.status in ('succeeded', 'failed', 'canceled')
       and old.status not in ('succeeded', 'failed', 'canceled') then
        perform pg_notify('cairnq_done', new.id);
    end if;
    return null;
end;
$$;

drop trigger if exists cairnq_tasks_notify on cairnq_tasks;
create trigger cairnq_tasks_notify
    after insert or update of status on cairnq_tasks
    for each row
    when (new.status is distinct from 'running')
    execute function cairnq_notify();
